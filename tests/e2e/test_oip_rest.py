"""The Open Inference Protocol's REST door (issue 28) on --http-listen,
called with the curl CLI only: JSON inference per task equal to the dserve.v1
gRPC answers (floats within 1e-6, same labels and spans), nested and flat
`data`, the binary tensor data extension with bodies built byte by byte here
(Inference-Header-Content-Length, 4-byte little-endian lengths) and binary
outputs parsed the same way, health / metadata / config / statistics routes,
versions, every error status with {"error": ...} naming the tensor, auth,
drain, and the metrics under protocol="oip".
"""
import errno
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import e2e_support as e2e
import http_support as hs
import oip_support as o
from e2e_support import pb

TOL = 1e-6
TOKEN = "oip-rest-token"


def curl(url, body=None, headers=(), method=None):
    """curl CLI: returns (status, {header: value} lower-cased, body bytes)."""
    exe = shutil.which("curl") or "/usr/bin/curl"
    folder = tempfile.mkdtemp(dir=e2e.SCRATCH, prefix="oip-curl-")
    try:
        args = [exe, "-sS", "-D", os.path.join(folder, "h"), "-o", os.path.join(folder, "b"), "-w", "%{http_code}"]
        for h in headers:
            args += ["-H", h]
        if body is not None:
            with open(os.path.join(folder, "req"), "wb") as f:
                f.write(body if isinstance(body, bytes) else json.dumps(body).encode("utf-8"))
            args += ["--data-binary", "@" + os.path.join(folder, "req")]
            if not any(h.lower().startswith("content-type") for h in headers):
                args += ["-H", "content-type: application/json"]
        if method:
            args += ["-X", method]
        out = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise AssertionError("curl failed: %s" % out.stderr)
        got_headers = {}
        with open(os.path.join(folder, "h"), "rb") as f:
            for line in f.read().decode("latin-1").splitlines()[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    got_headers[k.strip().lower()] = v.strip()
        with open(os.path.join(folder, "b"), "rb") as f:
            data = f.read()
        return int(out.stdout), got_headers, data
    finally:
        shutil.rmtree(folder, True)


def tensor(name, values, shape=None):
    return {"name": name, "datatype": "BYTES", "shape": shape or [len(values)], "data": values}


def binary_request(tensors, outputs=None, parameters=None):
    """A binary-extension body built byte by byte: the JSON header (inputs with
    parameters.binary_data_size), then each input's BYTES elements as a 4-byte
    little-endian length and the UTF-8 bytes. Returns (body, header length)."""
    inputs, blobs = [], []
    for name, values, shape in tensors:
        blob = b"".join(struct.pack("<I", len(v)) + v for v in
                        (x.encode("utf-8") if isinstance(x, str) else x for x in values))
        blobs.append(blob)
        inputs.append({"name": name, "datatype": "BYTES", "shape": shape,
                       "parameters": {"binary_data_size": len(blob)}})
    header = {"inputs": inputs}
    if outputs is not None:
        header["outputs"] = outputs
    if parameters is not None:
        header["parameters"] = parameters
    head = json.dumps(header).encode("utf-8")
    return head + b"".join(blobs), len(head)


def parse_binary_response(headers, body):
    """{name: (datatype, shape, values)} of a reply with binary outputs."""
    n = int(headers["inference-header-content-length"])
    header = json.loads(body[:n].decode("utf-8"))
    pos, out = n, {}
    for t in header["outputs"]:
        if "data" in t:
            out[t["name"]] = (t["datatype"], t["shape"], t["data"])
            continue
        size = t["parameters"]["binary_data_size"]
        raw = body[pos:pos + size]
        pos += size
        out[t["name"]] = (t["datatype"], t["shape"], o.decode_raw(t["datatype"], raw))
    assert pos == len(body), (pos, len(body))
    return header, out


def json_outputs(reply):
    return {t["name"]: (t["datatype"], t["shape"], t["data"]) for t in reply["outputs"]}


class OipRestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = hs.HttpServerProcess(e2e.test_models(), ["--workers", "1"], name="oip-rest").start()
        cls.channel = cls.server.channel()
        cls.v1 = cls.server.stub(cls.channel)
        cls.versions = {m.name: m.version for m in cls.v1.ListModels(pb.ListModelsRequest(), timeout=10).models}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def url(self, path):
        return self.server.url(path)

    def call(self, path, body=None, status=200, headers=(), method=None):
        code, h, data = curl(self.url(path), body, headers, method)
        self.assertEqual(code, status, data[:1000])
        return h, data

    def infer(self, model, body, status=200, version=None):
        path = "/v2/models/%s%s/infer" % (model, "/versions/" + version if version else "")
        h, data = self.call(path, body, status)
        reply = json.loads(data)
        if status == 200:
            self.assertTrue(h.get("x-request-id"))
        return reply

    def error(self, model, body, status, *words):
        reply = self.infer(model, body, status)
        self.assertEqual(list(reply), ["error"], reply)
        for w in words:
            self.assertIn(w, reply["error"])
        return reply["error"]

    # -------------------------------------------------------- health, info --

    def test_health_and_server_metadata(self):
        self.call("/v2/health/live")
        h, data = self.call("/v2/health/ready")
        self.assertEqual(json.loads(data), {"ready": True})
        md = json.loads(self.call("/v2")[1])
        self.assertEqual(md["name"], "dserve")
        self.assertIn("binary_tensor_data", md["extensions"])

    def test_model_metadata_ready_config_versions(self):
        for model, version in self.versions.items():
            md = json.loads(self.call("/v2/models/" + model)[1])
            self.assertEqual((md["name"], md["versions"]), (model, [version]))
            self.assertEqual(json.loads(self.call("/v2/models/%s/versions/%s" % (model, version))[1]), md)
            self.assertTrue(all(isinstance(d, int) for t in md["inputs"] + md["outputs"] for d in t["shape"]))
            self.call("/v2/models/%s/ready" % model)
            self.call("/v2/models/%s/versions/%s/ready" % (model, version))
            self.call("/v2/models/%s/versions/%s/ready" % (model, "0" * 16), status=400)
            config = json.loads(self.call("/v2/models/%s/config" % model)[1])
            self.assertEqual([i["name"] for i in config["input"]], [t["name"] for t in md["inputs"]])
            self.assertEqual(config["max_batch_size"], 256 if model == "classify" else 0)
            self.assertIn("dynamic_batching", config)
            err = json.loads(self.call("/v2/models/%s/versions/%s" % (model, "0" * 16), status=404)[1])
            self.assertIn("version", err["error"])
        self.call("/v2/models/nope/ready", status=400)
        self.assertIn("nope", json.loads(self.call("/v2/models/nope", status=404)[1])["error"])
        self.assertIn("error", json.loads(self.call("/v2/models/classify/bogus", status=404)[1]))

    def test_statistics_count_the_calls(self):
        stats = lambda: json.loads(self.call("/v2/models/rerank/stats")[1])["model_stats"][0]
        before = stats()
        self.infer("rerank", {"inputs": [tensor("QUERY", [o.QUERY]), tensor("DOCUMENTS", o.DOCUMENTS)]})
        after = stats()
        self.assertEqual(after["inference_stats"]["success"]["count"], before["inference_stats"]["success"]["count"] + 1)
        self.assertEqual(after["inference_count"], before["inference_count"] + len(o.DOCUMENTS))
        self.assertGreater(after["execution_count"], before["execution_count"])
        every = json.loads(self.call("/v2/models/stats")[1])["model_stats"]
        self.assertEqual({s["name"] for s in every}, set(self.versions))

    # ---------------------------------------------------------- inference --

    def test_classify_json_equals_v1(self):
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS), timeout=60)
        flat = self.infer("classify", {"id": "r-1", "inputs": [tensor("TEXT", o.TEXTS)]})
        nested = self.infer("classify", {"inputs": [tensor("TEXT", [[t] for t in o.TEXTS], [3, 1])]})
        self.assertEqual(flat["id"], "r-1")
        self.assertEqual(flat["model_version"], self.versions["classify"])
        for reply in (flat, nested):
            got = json_outputs(reply)
            labels = e2e.CLASSIFY_LABELS
            self.assertEqual(got["PROBABILITIES"][:2], ("FP32", [3, len(labels)]))
            for t, result in enumerate(want.results):
                scores = {ls.label: ls.score for ls in result.labels}
                for j, label in enumerate(labels):
                    self.assertAlmostEqual(got["PROBABILITIES"][2][t * len(labels) + j], scores[label], delta=TOL)
            self.assertEqual(got["LABEL"], ("BYTES", [3, 1], [r.labels[0].label for r in want.results]))
        only = self.infer("classify", {"inputs": [tensor("TEXT", o.TEXTS[:1])], "outputs": [{"name": "LABEL"}],
                                       "parameters": {"top_k": 3}})
        self.assertEqual(json_outputs(only), {"LABEL": ("BYTES", [1, 3], [l.label for l in want.results[0].labels[:3]])})

    def test_answer_json_equals_v1(self):
        want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS, top_k=2),
                              timeout=60)
        got = json_outputs(self.infer("answer", {
            "inputs": [tensor("QUESTION", [o.QUESTION]), tensor("CONTEXT", o.CONTEXTS)], "parameters": {"top_k": 2}}))
        k = len(want.answers)
        self.assertEqual(got["ANSWER"], ("BYTES", [k], [a.text for a in want.answers]))
        self.assertEqual(got["START"], ("INT64", [k], [a.start_char for a in want.answers]))
        self.assertEqual(got["END"], ("INT64", [k], [a.end_char for a in want.answers]))
        self.assertEqual(got["CONTEXT_INDEX"][2], [a.context_index for a in want.answers])
        for s, a in zip(got["SCORE"][2], want.answers):
            self.assertAlmostEqual(s, a.score, delta=TOL)
        self.assertEqual(got["NO_ANSWER"], ("BOOL", [1], [want.no_answer]))

    def test_rerank_json_equals_v1(self):
        want = self.v1.Rerank(pb.RerankRequest(model="rerank", query=o.QUERY, documents=o.DOCUMENTS), timeout=60)
        got = json_outputs(self.infer("rerank", {"inputs": [tensor("QUERY", [o.QUERY]),
                                                            tensor("DOCUMENTS", o.DOCUMENTS)]}))
        self.assertEqual(got["SCORES"][:2], ("FP32", [len(o.DOCUMENTS)]))
        for d in want.results:
            self.assertAlmostEqual(got["SCORES"][2][d.index], d.score, delta=TOL)

    def test_binary_extension_in_and_out(self):
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS), timeout=60)
        body, n = binary_request([("TEXT", o.TEXTS, [3, 1])], parameters={"binary_data_output": True})
        h, data = self.call("/v2/models/classify/infer", body,
                            headers=["Inference-Header-Content-Length: %d" % n,
                                     "content-type: application/octet-stream"])
        header, got = parse_binary_response(h, data)
        self.assertTrue(all("binary_data_size" in t["parameters"] for t in header["outputs"]))
        labels = e2e.CLASSIFY_LABELS
        for t, result in enumerate(want.results):
            scores = {ls.label: ls.score for ls in result.labels}
            for j, label in enumerate(labels):
                self.assertAlmostEqual(got["PROBABILITIES"][2][t * len(labels) + j], scores[label], delta=TOL)
        self.assertEqual(got["LABEL"][2], [r.labels[0].label for r in want.results])

        # Binary inputs, one output binary (per-output parameter) and one JSON.
        want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS), timeout=60)
        body, n = binary_request([("QUESTION", [o.QUESTION], [1]), ("CONTEXT", o.CONTEXTS, [2])],
                                 outputs=[{"name": "ANSWER", "parameters": {"binary_data": True}},
                                          {"name": "START"}, {"name": "NO_ANSWER", "parameters": {"binary_data": True}}])
        h, data = self.call("/v2/models/answer/infer", body, headers=["Inference-Header-Content-Length: %d" % n])
        header, got = parse_binary_response(h, data)
        self.assertEqual([t["name"] for t in header["outputs"]], ["ANSWER", "START", "NO_ANSWER"])
        self.assertIn("data", header["outputs"][1])
        self.assertEqual(got["ANSWER"][2], [a.text for a in want.answers])
        self.assertEqual(got["START"][2], [a.start_char for a in want.answers])
        self.assertEqual(got["NO_ANSWER"][2], [want.no_answer])

        # Binary in, JSON out (no binary output asked): a plain JSON reply.
        want = self.v1.Rerank(pb.RerankRequest(model="rerank", query=o.QUERY, documents=o.DOCUMENTS), timeout=60)
        body, n = binary_request([("QUERY", [o.QUERY], [1]), ("DOCUMENTS", o.DOCUMENTS, [4])])
        h, data = self.call("/v2/models/rerank/infer", body, headers=["Inference-Header-Content-Length: %d" % n])
        self.assertNotIn("inference-header-content-length", h)
        scores = json_outputs(json.loads(data))["SCORES"][2]
        for d in want.results:
            self.assertAlmostEqual(scores[d.index], d.score, delta=TOL)

    # ------------------------------------------------------------- errors --

    def test_errors_name_the_tensor(self):
        self.error("classify", {"inputs": [{"name": "TEXT", "datatype": "FP32", "shape": [1], "data": [1.5]}]}, 400,
                   "TEXT", "FP32", "BYTES")
        self.error("answer", {"inputs": [tensor("QUESTION", [o.QUESTION])]}, 400, "CONTEXT", "missing")
        self.error("classify", {"inputs": [tensor("TEXT", ["a", "b"], [3])]}, 400, "TEXT", "shape")
        self.error("classify", {"inputs": [tensor("TEXT", [1, 2])]}, 400, "TEXT", "string")
        self.error("classify", {"inputs": [tensor("TEXT", ["a", ""])]}, 400, "TEXT[1]", "empty")
        self.error("rerank", {"inputs": [tensor("QUERY", ["a", "b"]), tensor("DOCUMENTS", ["x"])]}, 400, "QUERY")
        self.error("classify", {"inputs": [tensor("TEXT", ["a"])], "outputs": [{"name": "NOPE"}]}, 400, "NOPE")
        self.error("classify", {"inputs": [tensor("TEXT", ["a"])], "parameters": {"top_k": "x"}}, 400, "top_k")
        self.error("classify", {"nothing": []}, 400, "inputs")
        self.error("nope", {"inputs": [tensor("TEXT", ["a"])]}, 404, "nope")
        h, data = self.call("/v2/models/classify/versions/%s/infer" % ("0" * 16), {"inputs": [tensor("TEXT", ["a"])]},
                            status=404)
        self.assertIn("version", json.loads(data)["error"])
        _, data = self.call("/v2/models/classify/infer", b"{not json", status=400)
        self.assertIn("error", json.loads(data))
        # Invalid UTF-8 can only come in binary data: named with its element.
        body, n = binary_request([("TEXT", ["fine", o.BAD_UTF8], [2])])
        _, data = self.call("/v2/models/classify/infer", body, status=400,
                            headers=["Inference-Header-Content-Length: %d" % n])
        err = json.loads(data)["error"]
        for w in ("TEXT", "element 1", "UTF-8"):
            self.assertIn(w, err)
        # A length prefix longer than the data, and a header length past the body.
        head = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                       "parameters": {"binary_data_size": 7}}]}).encode()
        body = head + struct.pack("<I", 9) + b"abc"
        _, data = self.call("/v2/models/classify/infer", body, status=400,
                            headers=["Inference-Header-Content-Length: %d" % len(head)])
        self.assertIn("TEXT", json.loads(data)["error"])
        _, data = self.call("/v2/models/classify/infer", body, status=400,
                            headers=["Inference-Header-Content-Length: %d" % (len(body) + 1)])
        self.assertIn("Inference-Header-Content-Length", json.loads(data)["error"])

    def test_metrics_protocol_oip(self):
        self.infer("classify", {"inputs": [tensor("TEXT", ["refund please"])]})
        samples = self.server.metrics()
        self.assertGreater(e2e.metric_value(samples, "dserve_requests_total", model="classify", code="OK",
                                            protocol="oip"), 0)
        before = e2e.metric_value(samples, "dserve_requests_total", model="", code="INVALID_ARGUMENT", protocol="oip")
        self.error("classify", {"inputs": [{"name": "TEXT", "datatype": "INT64", "shape": [1], "data": [1]}]}, 400,
                   "TEXT")
        after = e2e.metric_value(self.server.metrics(), "dserve_requests_total", model="", code="INVALID_ARGUMENT",
                                 protocol="oip")
        self.assertEqual(after, before + 1)


class OipRestAuthDrainTest(unittest.TestCase):
    def test_auth_token_except_health(self):
        folder = e2e.scratch_dir("oip-rest-auth")
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        server = hs.HttpServerProcess({"rerank": e2e.test_models()["rerank"]}, ["--auth-token-file", token_file],
                                      name="oip-rest-auth").start()
        try:
            body = {"inputs": [tensor("QUERY", [o.QUERY]), tensor("DOCUMENTS", o.DOCUMENTS[:2])]}
            code, h, data = curl(server.url("/v2/models/rerank/infer"), body)
            self.assertEqual(code, 401)
            self.assertIn("error", json.loads(data))
            self.assertEqual(h.get("www-authenticate"), "Bearer")
            self.assertEqual(curl(server.url("/v2/models/rerank"))[0], 401)
            self.assertEqual(curl(server.url("/v2/models/rerank/infer"), body, ["authorization: Bearer wrong"])[0], 401)
            self.assertEqual(curl(server.url("/v2/models/rerank/infer"), body, ["authorization: Bearer " + TOKEN])[0],
                             200)
            for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/rerank/ready"):
                self.assertEqual(curl(server.url(path))[0], 200, path)
        finally:
            server.stop()

    def test_drain(self):
        hold = e2e.WorkerHold("oip-rest-drain")
        server = hs.HttpServerProcess({"classify": e2e.test_models()["classify"]},
                                      ["--workers", "1", "--drain-timeout-s", "30"], name="oip-rest-drain",
                                      env=hold.env()).start()
        try:
            body = {"inputs": [tensor("TEXT", o.TEXTS)]}
            self.assertEqual(curl(server.url("/v2/models/classify/infer"), body)[0], 200)
            batches = lambda: e2e.metric_value(server.metrics(), "dserve_batch_size_count", model="classify")
            before = batches()
            hold.hold()
            result = {}
            t = threading.Thread(target=lambda: result.update(
                r=curl(server.url("/v2/models/classify/infer"), body)))
            t.start()
            e2e.wait_until("the held worker to take the call", lambda: batches() == before + 1, server=server)
            server.terminate()
            e2e.wait_until("/v2/health/ready to say 400 after SIGTERM",
                           lambda: curl(server.url("/v2/health/ready"))[0] == 400, server=server)
            self.assertEqual(curl(server.url("/v2/models/classify/ready"))[0], 400)
            code, h, data = curl(server.url("/v2/models/classify/infer"), body)
            self.assertEqual(code, 503)
            self.assertIn("draining", json.loads(data)["error"])
            self.assertEqual(h.get("retry-after"), "1")
            self.assertEqual(curl(server.url("/v2/health/live"))[0], 200)
            self.assertTrue(t.is_alive(), "the worker is held: the accepted call still waits")
            hold.release()
            t.join(60)
            code, _, data = result["r"]
            self.assertEqual(code, 200, data)
            self.assertEqual(json_outputs(json.loads(data))["PROBABILITIES"][1], [3, len(e2e.CLASSIFY_LABELS)])
            self.assertEqual(server.wait(40), 0, server.log_tail())
        finally:
            hold.release()
            server.stop()


class OipRestLifecycleTest(unittest.TestCase):
    """Readiness while the models load and across a hot reload's version
    switch (REST, and gRPC ModelReady once gRPC listens)."""

    def test_not_ready_while_loading(self):
        # spm.model is a FIFO: loading blocks reading it until the test feeds
        # it, so the server is certainly still loading when probed.
        d = os.path.join(e2e.scratch_dir("oip-loading"), "classify")
        shutil.copytree(e2e.test_models()["classify"], d)
        spm = os.path.join(d, "spm.model")
        with open(spm, "rb") as f:
            content = f.read()
        os.unlink(spm)
        os.mkfifo(spm)
        server = hs.HttpServerProcess({"classify": d}, ["--workers", "1"], name="oip-loading")
        starter = threading.Thread(target=server.start, daemon=True)
        starter.start()
        try:
            e2e.wait_until("the HTTP port line", lambda: server.http_port is not None, server=server)
            self.assertTrue(server.running(), server.log_tail())
            self.assertEqual(curl(server.url("/v2/health/live"))[0], 200)
            for path in ("/v2/health/ready", "/v2/models/classify/ready"):
                code, _, data = curl(server.url(path))
                self.assertEqual((code, json.loads(data)), (400, {"ready": False}), path)
            self.assertEqual(curl(server.url("/v2/models/classify"))[0], 503)
            # Feed the tokenizer once, then leave a regular file for later reads.
            fd = None
            deadline = time.monotonic() + 30
            while fd is None:
                try:
                    fd = os.open(spm, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    if e.errno != errno.ENXIO or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            os.set_blocking(fd, True)
            os.write(fd, content)
            with open(spm + ".tmp", "wb") as f:
                f.write(content)
            os.replace(spm + ".tmp", spm)
            os.close(fd)
            starter.join(90)
            self.assertIsNotNone(server.port, server.log_tail())
            self.assertEqual(curl(server.url("/v2/health/ready"))[0], 200)
            self.assertEqual(curl(server.url("/v2/models/classify/ready"))[0], 200)
        finally:
            server.stop()

    def test_reload_switches_the_ready_version(self):
        d = os.path.join(e2e.scratch_dir("oip-reload"), "classify")
        shutil.copytree(e2e.test_models()["classify"], d)
        server = hs.HttpServerProcess({"classify": d}, ["--workers", "1"], name="oip-reload").start()
        try:
            stub = o.stub(server)
            version = lambda: json.loads(curl(server.url("/v2/models/classify"))[2])["versions"]
            [old] = version()
            config = os.path.join(d, "config.json")
            with open(config) as f:
                cfg = json.load(f)
            cfg["oip_reload_test"] = 1  # a new checkpoint version, same weights and labels
            with open(config + ".tmp", "w") as f:
                json.dump(cfg, f)
            os.replace(config + ".tmp", config)
            server.proc.send_signal(signal.SIGHUP)
            e2e.wait_until("the reload to switch versions", lambda: version() != [old], server=server)
            [new] = version()
            body = {"inputs": [tensor("TEXT", ["refund please"])]}
            self.assertEqual(curl(server.url("/v2/models/classify/versions/%s/ready" % new))[0], 200)
            self.assertEqual(curl(server.url("/v2/models/classify/versions/%s/ready" % old))[0], 400)
            self.assertEqual(curl(server.url("/v2/models/classify/versions/%s/infer" % old), body)[0], 404)
            code, _, data = curl(server.url("/v2/models/classify/versions/%s/infer" % new), body)
            self.assertEqual((code, json.loads(data)["model_version"]), (200, new))
            self.assertTrue(stub.ModelReady(o.oip.ModelReadyRequest(name="classify", version=new), timeout=10).ready)
            self.assertFalse(stub.ModelReady(o.oip.ModelReadyRequest(name="classify", version=old), timeout=10).ready)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
