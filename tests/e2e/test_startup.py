"""Start-up of `dserve serve`: settings from --config (YAML and JSON, flags
override), checkpoints that cannot load (exit 2 naming the file), health
per model name, server reflection, and the model version in ListModels and
dserve_model_info."""
import json
import os
import subprocess
import unittest

from e2e_support import (BIN, ServerProcess, grpc, health_pb2, health_pb2_grpc, metric_value, pb, scratch_dir,
                         test_models)


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
        cls.server = ServerProcess(test_models(), name="startup").start()

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


if __name__ == "__main__":
    unittest.main()
