"""Start-up of `dserve serve`: settings from --config (YAML and JSON, flags
override), checkpoints that cannot load (exit 2 naming the file), health
per model name, server reflection, and the model version in ListModels and
dserve_model_info. The servers here run serve's default --dtype, auto
(issue 27): the choice is logged with both timings, reported as the served
dtype (ListModels, dserve_model_info) with requested_dtype "auto", classify
results match `dserve forward` in the chosen dtype (and fp32's argmax), and
a hot reload keeps the choice without timing again."""
import json
import os
import re
import shutil
import signal
import subprocess
import unittest

import numpy as np

from e2e_support import (BIN, CLASSIFY_LABELS, ServerProcess, classify_oracle, grpc, health_pb2, health_pb2_grpc,
                         metric_value, pb, scratch_dir, single_ids, test_models, wait_until)
from test_hot_reload import retrained_copy, swap_in

# "model NAME: --dtype auto: serving DTYPE (why; RxL, T threads, N rounds:
# fp32 Xs, bf16 Ys (...)...)" or, where bf16 cannot pay, "... (why: CPU bf16
# matmul path P; no timing)".
AUTO_LINE = re.compile(r"model (\S+): --dtype auto: serving (fp32|bf16) \((.*)\)$")
TEXTS = ["The parcel never arrived and I want my money back for the order.", "reset my password please",
         "I was charged twice this month", "where is my package?"]


def auto_choices(server):
    """{model: (dtype, rest of the line)} from the server's log."""
    with open(server.log_path, errors="replace") as f:
        found = [AUTO_LINE.search(line.rstrip("\n")) for line in f]
    return {m.group(1): (m.group(2), m.group(3)) for m in found if m}


def auto_line_count(server, model):
    with open(server.log_path, errors="replace") as f:
        return sum(1 for line in f if ("model %s: --dtype auto:" % model) in line)


def forward_logits(model_dir, texts, dtype):
    rows = "".join(json.dumps({"input_ids": single_ids(t)}) + "\n" for t in texts)
    out = subprocess.run([BIN, "forward", "--model", model_dir, "--batch-size", "1", "--dtype", dtype], input=rows,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line)["logits"] for line in out.stdout.splitlines() if line.strip()]


def check_auto_line(test, dtype, rest):
    if "no timing" in rest:  # bf16 not offered on this CPU
        test.assertEqual(dtype, "fp32", rest)
        return
    m = re.search(r"fp32 ([0-9.]+)s, bf16 ([0-9.]+)s \(bf16 ([0-9.]+)x\)", rest)
    test.assertIsNotNone(m, rest)
    fp32_s, bf16_s, speedup = float(m.group(1)), float(m.group(2)), float(m.group(3))
    test.assertGreater(fp32_s, 0, rest)
    test.assertGreater(bf16_s, 0, rest)
    # The logged speedup is the ratio of the unrounded times. The seconds are
    # rounded to 0.1 ms (a few percent of a toy model's forward), the speedup
    # to 0.01: it must lie within what the rounded times allow.
    half = 0.00005
    test.assertGreaterEqual(speedup, (fp32_s - half) / (bf16_s + half) - 0.005, rest)
    test.assertLessEqual(speedup, (fp32_s + half) / (bf16_s - half) + 0.005, rest)
    if dtype == "bf16":  # only when faster by 5% (kBf16MinSpeedup) and every argmax kept
        test.assertGreaterEqual(speedup, 1.05, rest)
        test.assertRegex(rest, r"argmax kept (\d+)/\1\b")


def check_classify(test, stub, model, model_dir, dtype):
    """Served scores against `dserve forward` in the served dtype, and the
    top label against fp32's."""
    response = stub.Classify(pb.ClassifyRequest(model=model, texts=TEXTS), timeout=30)
    fp32 = forward_logits(model_dir, TEXTS, "fp32")
    same = fp32 if dtype == "fp32" else forward_logits(model_dir, TEXTS, dtype)
    # bf16: the served batch and forward's differ in shape, so bf16 roundings differ.
    tol = 1e-4 if dtype == "fp32" else 3e-2
    for text, got, want, exact in zip(TEXTS, response.results, same, fp32):
        scores = {l.label: l.score for l in got.labels}
        for label, score in classify_oracle(want):
            test.assertAlmostEqual(scores[label], score, delta=tol, msg="%s %s (%s)" % (text, label, dtype))
        test.assertEqual(got.labels[0].label, CLASSIFY_LABELS[int(np.argmax(exact))], text)


def run_serve(args, timeout_s=60):
    return subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""] + args,
                          capture_output=True, text=True, timeout=timeout_s)


class ConfigFile(unittest.TestCase):
    def check_config(self, text, suffix):
        models = test_models()
        path = os.path.join(scratch_dir("config"), "dserve" + suffix)
        with open(path, "w") as f:
            f.write(text.replace("CLASSIFY_DIR", models["classify"]).replace("ANSWER_DIR", models["answer"]))
        # --max-texts-per-request on the command line overrides the file's 3.
        server = ServerProcess({}, ["--config", path, "--max-texts-per-request", "4"], name="config").start()
        try:
            stub = server.stub()
            listed = {m.name: m.task for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
            self.assertEqual(listed, {"intents": "classify", "qa": "answer"})
            ok = stub.Classify(pb.ClassifyRequest(model="intents", texts=["a"] * 4), timeout=30)
            self.assertEqual(len(ok.results), 4)
            with self.assertRaises(grpc.RpcError) as e:
                stub.Classify(pb.ClassifyRequest(model="intents", texts=["a"] * 5), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("limit of 4", e.exception.details())
            # max_batch_size 1 from the file: every formed batch has one item.
            stub.Classify(pb.ClassifyRequest(model="intents", texts=["a", "b", "c"]), timeout=30)
            samples = server.metrics()
            count = metric_value(samples, "dserve_batch_size_count", model="intents")
            total = metric_value(samples, "dserve_batch_size_sum", model="intents")
            self.assertGreater(count, 0)
            self.assertEqual(total, count)
        finally:
            server.stop()

    def test_yaml(self):
        self.check_config(
            "model:\n  intents: CLASSIFY_DIR\n  qa: ANSWER_DIR\n"
            "max_batch_size: 1\nmax-texts-per-request: 3\ndtype: fp32\n", ".yaml")

    def test_json(self):
        self.check_config(json.dumps({"models": ["intents=CLASSIFY_DIR", "qa=ANSWER_DIR"], "max_batch_size": 1,
                                      "max_texts_per_request": 3}), ".json")

    def test_unknown_setting_is_named(self):
        path = os.path.join(scratch_dir("config"), "unknown.yaml")
        with open(path, "w") as f:
            f.write("model: [m=%s]\nmax_batch_sise: 4\n" % test_models()["classify"])
        result = run_serve(["--config", path])
        self.assertEqual(result.returncode, 2)
        self.assertIn("max-batch-sise", result.stderr)

    def test_bad_config_file_fails_fast(self):
        path = os.path.join(scratch_dir("config"), "bad.yaml")
        with open(path, "w") as f:
            f.write("model: [unclosed\n")
        result = run_serve(["--config", path])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("config", (result.stderr + result.stdout).lower())


class UnloadableCheckpoints(unittest.TestCase):
    """Exit 2 within seconds, the message naming the file and the problem
    (every kind of corrupt checkpoint: test_corrupt_checkpoints.py)."""

    def expect_exit_2(self, model_dir, *needles):
        result = run_serve(["--model", "m=" + model_dir])
        self.assertEqual(result.returncode, 2, result.stderr)
        for needle in needles:
            self.assertIn(needle, result.stderr)

    def test_missing_directory(self):
        self.expect_exit_2("/nonexistent/model", "/nonexistent/model")

    def test_bad_flag_values(self):
        result = run_serve(["--model", "m=" + test_models()["classify"], "--max-batch-size", "0"])
        self.assertEqual(result.returncode, 2)
        self.assertIn("--max-batch-size", result.stderr)
        result = run_serve(["--model", "nodir"])
        self.assertEqual(result.returncode, 2)
        self.assertIn("NAME=DIR", result.stderr)


class HealthReflectionVersion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # No --dtype: serve's default, auto.
        cls.server = ServerProcess(test_models(), name="startup", dtype=None).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_health_per_model(self):
        health = health_pb2_grpc.HealthStub(self.server.channel())
        for service in ("", "dserve.v1.Inference", "classify", "answer", "rerank"):
            status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            self.assertEqual(status, health_pb2.HealthCheckResponse.SERVING, service)
        with self.assertRaises(grpc.RpcError) as e:
            health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_the_service(self):
        # grpc.reflection.v1alpha.ServerReflection, spoken with a hand-built
        # request: field 7 (list_services) = "".
        channel = self.server.channel()
        call = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                     request_serializer=lambda b: b, response_deserializer=lambda b: b)
        responses = list(call(iter([b"\x3a\x00"]), timeout=10))
        self.assertEqual(len(responses), 1)
        self.assertIn(b"dserve.v1.Inference", responses[0])

    def test_version_in_list_models_and_metrics(self):
        models = self.server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models
        versions = {m.name: m.version for m in models}
        self.assertEqual(len(versions), 3)
        for name, version in versions.items():
            self.assertRegex(version, r"^[0-9a-f]{16}$", name)
            self.assertEqual(metric_value(self.server.metrics(), "dserve_model_info", model=name, version=version),
                             1.0)

    def test_dtype_auto_is_logged_and_reported(self):
        choices = auto_choices(self.server)
        self.assertEqual(set(choices), {"classify", "answer", "rerank"}, self.server.log_tail())
        models = {m.name: m for m in self.server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
        samples = self.server.metrics()
        for name, (dtype, rest) in choices.items():
            with self.subTest(model=name):
                check_auto_line(self, dtype, rest)
                self.assertEqual(models[name].dtype, dtype)
                self.assertEqual(models[name].requested_dtype, "auto")
                self.assertEqual(metric_value(samples, "dserve_model_info", model=name, dtype=dtype), 1.0)

    def test_dtype_auto_serves_correct_results(self):
        dtype = auto_choices(self.server)["classify"][0]
        check_classify(self, self.server.stub(), "classify", test_models()["classify"], dtype)
        answer = self.server.stub().Answer(pb.AnswerRequest(
            model="answer", question="what is late?", contexts=["my order is late"]), timeout=30)
        self.assertTrue(answer.answers or answer.no_answer)
        ranked = self.server.stub().Rerank(pb.RerankRequest(model="rerank", query="refund",
                                                            documents=["a refund", "the weather"]), timeout=30)
        self.assertEqual(sorted(r.index for r in ranked.results), [0, 1])


class DtypeAutoReload(unittest.TestCase):
    """A hot reload keeps the dtype --dtype auto chose at start-up (no
    second timing: it would run beside the serving version)."""

    def test_reload_keeps_the_choice(self):
        live = os.path.join(scratch_dir("auto-reload"), "classify")
        shutil.copytree(test_models()["classify"], live)
        server = ServerProcess({"classify": live}, name="auto-reload", dtype=None).start()
        try:
            stub = server.stub()
            before = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models}["classify"]
            dtype = auto_choices(server)["classify"][0]
            self.assertEqual(before.dtype, dtype)
            swap_in(retrained_copy(live, live + ".new"), live)
            server.proc.send_signal(signal.SIGHUP)
            wait_until("the reload", lambda: stub.ListModels(pb.ListModelsRequest(), timeout=10).models[0].version
                       != before.version, timeout_s=60, server=server)
            after = stub.ListModels(pb.ListModelsRequest(), timeout=10).models[0]
            self.assertEqual((after.dtype, after.requested_dtype), (dtype, "auto"))
            self.assertEqual(auto_line_count(server, "classify"), 1, server.log_tail())
            with open(server.log_path, errors="replace") as f:
                self.assertIn("model classify: the reload keeps dtype %s, chosen by --dtype auto" % dtype, f.read())
            samples = server.metrics()
            self.assertEqual(metric_value(samples, "dserve_model_info", model="classify", version=after.version,
                                          dtype=dtype), 1.0)
            check_classify(self, stub, "classify", live, dtype)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
