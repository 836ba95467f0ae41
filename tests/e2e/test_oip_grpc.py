"""The Open Inference Protocol's gRPC door (issue 28): inference.
GRPCInferenceService on --listen, called through grpcio stubs generated from
tests/oip (a copy of the protocol's published proto, not the server's).
Each task's ModelInfer equals the dserve.v1 answer for the same inputs
(floats within 1e-6, same labels and spans), typed and raw tensors; server
and model metadata, readiness, Triton's ModelConfig and ModelStatistics
(counts that grow with the calls); every invalid-tensor case is
INVALID_ARGUMENT naming the tensor and never reaches the model; auth and
drain; metrics under protocol="oip"; and one ModelInfer per task from Node
(@grpc/grpc-js + @grpc/proto-loader, tests/e2e/oip_node).
"""
import json
import os
import shutil
import subprocess
import threading
import unittest

import grpc

import e2e_support as e2e
import oip_support as o
from e2e_support import pb
from oip_support import oip

TOL = 1e-6
TOKEN = "oip-e2e-token"


class OipGrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(e2e.test_models(), ["--workers", "1"], name="oip-grpc").start()
        cls.channel = cls.server.channel()
        cls.v1 = cls.server.stub(cls.channel)
        cls.oip = o.stub(cls.server, cls.channel)
        cls.versions = {m.name: m.version for m in cls.v1.ListModels(pb.ListModelsRequest(), timeout=10).models}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def infer(self, request):
        return self.oip.ModelInfer(request, timeout=60)

    def invalid(self, request, *words, code=grpc.StatusCode.INVALID_ARGUMENT):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.infer(request)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        for w in words:
            self.assertIn(w, ctx.exception.details())
        return ctx.exception.details()

    # ------------------------------------------------------- server, models --

    def test_server_live_ready_metadata(self):
        self.assertTrue(self.oip.ServerLive(oip.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(self.oip.ServerReady(oip.ServerReadyRequest(), timeout=10).ready)
        md = self.oip.ServerMetadata(oip.ServerMetadataRequest(), timeout=10)
        self.assertEqual(md.name, "dserve")
        self.assertTrue(md.version)
        for ext in ("binary_tensor_data", "model_configuration", "statistics"):
            self.assertIn(ext, md.extensions)

    def test_model_metadata_and_config_agree(self):
        want = {
            "classify": ({"TEXT": [-1, 1], "TEXT_PAIR": [-1, 1]},
                         {"PROBABILITIES": [-1, len(e2e.CLASSIFY_LABELS)], "LABEL": [-1, -1]}),
            "answer": ({"QUESTION": [1], "CONTEXT": [-1]},
                       {"ANSWER": [-1], "SCORE": [-1], "START": [-1], "END": [-1], "CONTEXT_INDEX": [-1],
                        "NO_ANSWER": [1], "NO_ANSWER_SCORE": [1]}),
            "rerank": ({"QUERY": [1], "DOCUMENTS": [-1]}, {"SCORES": [-1]}),
        }
        for model, (inputs, outputs) in want.items():
            md = self.oip.ModelMetadata(oip.ModelMetadataRequest(name=model), timeout=10)
            self.assertEqual(md.name, model)
            self.assertEqual(list(md.versions), [self.versions[model]])
            self.assertEqual({t.name: list(t.shape) for t in md.inputs}, inputs)
            self.assertEqual({t.name: list(t.shape) for t in md.outputs}, outputs)
            self.assertTrue(all(t.datatype == "BYTES" for t in md.inputs))
            # The same version by name.
            md2 = self.oip.ModelMetadata(oip.ModelMetadataRequest(name=model, version=self.versions[model]), timeout=10)
            self.assertEqual(md, md2)

            config = self.oip.ModelConfig(oip.ModelConfigRequest(name=model), timeout=10).config
            self.assertEqual(config.name, model)
            # perf_analyzer: input names match the metadata; dims are the
            # metadata's shapes without the batch dimension when batching.
            self.assertEqual([i.name for i in config.input], [t.name for t in md.inputs])
            self.assertEqual([x.name for x in config.output], [t.name for t in md.outputs])
            self.assertTrue(config.HasField("dynamic_batching"))
            self.assertEqual(config.max_batch_size, 256 if model == "classify" else 0)
            for i, t in zip(config.input, md.inputs):
                self.assertEqual(i.data_type, o.oip_config.TYPE_STRING)
                self.assertEqual(list(i.dims), list(t.shape)[1:] if config.max_batch_size else list(t.shape))
            self.assertEqual(config.parameters["task"].string_value, model)
            self.assertEqual(config.instance_group[0].count, 1)

    def test_model_ready_and_versions(self):
        for model, version in self.versions.items():
            self.assertTrue(self.oip.ModelReady(oip.ModelReadyRequest(name=model), timeout=10).ready)
            self.assertTrue(self.oip.ModelReady(oip.ModelReadyRequest(name=model, version=version), timeout=10).ready)
            # A version that is not the one serving (e.g. one being loaded) is not ready.
            self.assertFalse(self.oip.ModelReady(oip.ModelReadyRequest(name=model, version="0" * 16), timeout=10).ready)
        self.assertFalse(self.oip.ModelReady(oip.ModelReadyRequest(name="nope"), timeout=10).ready)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.oip.ModelMetadata(oip.ModelMetadataRequest(name="nope"), timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.oip.ModelConfig(oip.ModelConfigRequest(name="rerank", version="0" * 16), timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_and_health_list_the_service(self):
        # grpcurl finds the service through reflection: list_services (field 7).
        call = self.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                          request_serializer=lambda b: b, response_deserializer=lambda b: b)
        responses = list(call(iter([b"\x3a\x00"]), timeout=10))
        self.assertIn(b"inference.GRPCInferenceService", responses[0])
        # ... and the file that defines it (file_containing_symbol, field 4).
        symbol = b"inference.GRPCInferenceService"
        responses = list(call(iter([b"\x22" + bytes([len(symbol)]) + symbol]), timeout=10))
        self.assertIn(b"ModelInferRequest", responses[0])
        health = e2e.health_pb2_grpc.HealthStub(self.channel)
        status = health.Check(e2e.health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"),
                              timeout=5).status
        self.assertEqual(status, e2e.health_pb2.HealthCheckResponse.SERVING)

    def test_unserved_rpc_is_unimplemented(self):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.oip.RepositoryIndex(oip.RepositoryIndexRequest(), timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    # ----------------------------------------------------------- classify --

    def check_classify(self, got, want, label_columns=1):
        labels = e2e.CLASSIFY_LABELS
        dtype, shape, probs = got["PROBABILITIES"]
        self.assertEqual((dtype, shape), ("FP32", [len(want.results), len(labels)]))
        dtype, shape, best = got["LABEL"]
        self.assertEqual((dtype, shape), ("BYTES", [len(want.results), label_columns]))
        for t, result in enumerate(want.results):
            by_label = {ls.label: ls.score for ls in result.labels}
            for j, label in enumerate(labels):
                self.assertAlmostEqual(probs[t * len(labels) + j], by_label[label], delta=TOL)
            self.assertEqual(best[t * label_columns:(t + 1) * label_columns],
                             [ls.label for ls in result.labels[:label_columns]])

    def test_classify_equals_v1(self):
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS), timeout=60)
        for raw in (False, True):
            for shape in ([3], [3, 1]):
                r = self.infer(o.infer_request("classify", [("TEXT", o.TEXTS, shape)], raw=raw, request_id="c-1"))
                self.assertEqual((r.model_name, r.model_version, r.id), ("classify", self.versions["classify"], "c-1"))
                self.assertEqual(bool(r.raw_output_contents), raw, "raw replies to raw requests, typed to typed")
                self.check_classify(o.outputs_of(r), want)

    def test_classify_parameters_and_pairs(self):
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS, raw_scores=True), timeout=60)
        r = self.infer(o.infer_request("classify", [("TEXT", o.TEXTS, [3])], parameters={"raw_scores": True, "top_k": 2}))
        self.check_classify(o.outputs_of(r), want, label_columns=2)
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS, text_pairs=o.PAIRS), timeout=60)
        r = self.infer(o.infer_request("classify", [("TEXT", o.TEXTS, [3, 1]), ("TEXT_PAIR", o.PAIRS, [3, 1])]))
        self.check_classify(o.outputs_of(r), want)
        # truncation "none" refuses a text longer than max_length, naming the tensor.
        long_text = " ".join(["refund"] * 400)
        self.invalid(o.infer_request("classify", [("TEXT", ["ok", long_text], [2])],
                                     parameters={"truncation": "none"}), "TEXT[1]")

    # ------------------------------------------------------------- answer --

    def check_answer(self, got, want):
        k = len(want.answers)
        self.assertEqual(got["ANSWER"], ("BYTES", [k], [a.text for a in want.answers]))
        self.assertEqual(got["START"], ("INT64", [k], [a.start_char for a in want.answers]))
        self.assertEqual(got["END"], ("INT64", [k], [a.end_char for a in want.answers]))
        self.assertEqual(got["CONTEXT_INDEX"], ("INT64", [k], [a.context_index for a in want.answers]))
        self.assertEqual(got["SCORE"][:2], ("FP32", [k]))
        for s, a in zip(got["SCORE"][2], want.answers):
            self.assertAlmostEqual(s, a.score, delta=TOL)
        self.assertEqual(got["NO_ANSWER"], ("BOOL", [1], [want.no_answer]))
        self.assertAlmostEqual(got["NO_ANSWER_SCORE"][2][0], want.no_answer_score, delta=TOL)

    def test_answer_equals_v1(self):
        want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS, top_k=3),
                              timeout=60)
        self.assertTrue(want.answers)
        for raw in (False, True):
            r = self.infer(o.infer_request("answer", [("QUESTION", [o.QUESTION], [1]), ("CONTEXT", o.CONTEXTS, [2])],
                                           raw=raw, parameters={"top_k": 3}))
            got = o.outputs_of(r)
            self.check_answer(got, want)
            for text, start, end, c in zip(got["ANSWER"][2], got["START"][2], got["END"][2], got["CONTEXT_INDEX"][2]):
                self.assertEqual(o.CONTEXTS[c][start:end], text, "START/END are code-point offsets")

    def test_answer_parameters(self):
        tensors = [("QUESTION", [o.QUESTION], [1, 1]), ("CONTEXT", o.CONTEXTS, [2, 1])]
        for threshold in (-1e9, 1e9):
            want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS,
                                                   null_score_diff_threshold=threshold), timeout=60)
            got = o.outputs_of(self.infer(o.infer_request("answer", tensors,
                                                          parameters={"no_answer_threshold": threshold})))
            self.assertEqual(got["NO_ANSWER"][2], [threshold < 0])
            self.check_answer(got, want)
        want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS, top_k=5,
                                               max_answer_tokens=2), timeout=60)
        got = o.outputs_of(self.infer(o.infer_request("answer", tensors,
                                                      parameters={"max_answer_length": 2, "top_k": 5})))
        self.check_answer(got, want)

    def test_requested_outputs_only(self):
        r = self.infer(o.infer_request("answer", [("QUESTION", [o.QUESTION], [1]), ("CONTEXT", o.CONTEXTS[:1], [1])],
                                       outputs=["SCORE", "ANSWER"]))
        self.assertEqual([x.name for x in r.outputs], ["ANSWER", "SCORE"])
        r = self.infer(o.infer_request("classify", [("TEXT", o.TEXTS[:1], [1])], outputs=["LABEL"], raw=True))
        self.assertEqual([x.name for x in r.outputs], ["LABEL"])
        self.assertEqual(len(r.raw_output_contents), 1)

    # ------------------------------------------------------------- rerank --

    def test_rerank_equals_v1(self):
        want = self.v1.Rerank(pb.RerankRequest(model="rerank", query=o.QUERY, documents=o.DOCUMENTS), timeout=60)
        by_index = {d.index: d.score for d in want.results}
        for raw in (False, True):
            r = self.infer(o.infer_request("rerank", [("QUERY", [o.QUERY], [1]), ("DOCUMENTS", o.DOCUMENTS, [4])],
                                           raw=raw))
            dtype, shape, scores = o.outputs_of(r)["SCORES"]
            self.assertEqual((dtype, shape), ("FP32", [4]))
            for i, s in enumerate(scores):  # input order
                self.assertAlmostEqual(s, by_index[i], delta=TOL)
        want = self.v1.Rerank(pb.RerankRequest(model="rerank", query=o.QUERY, documents=o.DOCUMENTS, raw_scores=True),
                              timeout=60)
        r = self.infer(o.infer_request("rerank", [("QUERY", [o.QUERY], [1, 1]), ("DOCUMENTS", o.DOCUMENTS, [4, 1])],
                                       parameters={"raw_scores": True}))
        scores = o.outputs_of(r)["SCORES"][2]
        for d in want.results:
            self.assertAlmostEqual(scores[d.index], d.score, delta=TOL)

    # ------------------------------------------------------------- errors --

    def stats(self, model):
        s = self.oip.ModelStatistics(oip.ModelStatisticsRequest(name=model), timeout=10).model_stats[0]
        return (s.inference_count, s.execution_count, s.inference_stats.success.count, s.inference_stats.fail.count)

    def test_invalid_tensors_name_the_tensor_and_reach_no_model(self):
        before = {m: self.stats(m) for m in ("classify", "answer", "rerank")}
        req = o.infer_request("classify", [("TEXT", o.TEXTS[:1], [1])])
        req.inputs[0].datatype = "FP32"
        self.invalid(req, "TEXT", "datatype", "FP32", "BYTES")
        req = o.infer_request("classify", [("TEXT", [], [0])])
        req.inputs[0].datatype = "FP32"
        req.inputs[0].contents.fp32_contents.extend([1.0])
        req.inputs[0].shape[:] = [1]
        self.invalid(req, "TEXT", "datatype")
        self.invalid(o.infer_request("answer", [("QUESTION", [o.QUESTION], [1])]), "CONTEXT", "missing")
        self.invalid(o.infer_request("classify", [("TEXT", [o.BAD_UTF8], [1])]), "TEXT", "UTF-8")
        self.invalid(o.infer_request("classify", [("TEXT", ["ok", o.BAD_UTF8], [2])], raw=True), "TEXT", "element 1",
                     "UTF-8")
        self.invalid(o.infer_request("rerank", [("QUERY", [o.QUERY], [1]), ("DOCUMENTS", ["a", o.BAD_UTF8], [2])]),
                     "DOCUMENTS", "UTF-8")
        self.invalid(o.infer_request("classify", [("TEXT", ["a", "b"], [3])]), "TEXT", "shape [3]")
        self.invalid(o.infer_request("classify", [("TEXT", ["a", "b"], [1, 2])]), "TEXT", "shape")
        self.invalid(o.infer_request("rerank", [("QUERY", ["a", "b"], [2]), ("DOCUMENTS", ["x"], [1])]), "QUERY",
                     "one")
        self.invalid(o.infer_request("rerank", [("QUERY", ["a"], [1]), ("DOCS", ["x"], [1])]), "DOCS",
                     "no such input")
        self.invalid(o.infer_request("classify", [("TEXT", ["a", "b"], [2]), ("TEXT_PAIR", ["x"], [1])]),
                     "TEXT_PAIR")
        self.invalid(o.infer_request("classify", [("TEXT", ["a", ""], [2])]), "TEXT[1]", "empty")
        req = o.infer_request("classify", [("TEXT", ["a"], [1])], raw=True)
        req.raw_input_contents[0] = b"\x09\x00\x00\x00abc"  # says 9 bytes, holds 3
        self.invalid(req, "TEXT", "raw BYTES")
        self.invalid(o.infer_request("classify", [("TEXT", ["a"], [1])], parameters={"top_k": "two"}), "top_k")
        self.invalid(o.infer_request("classify", [("TEXT", ["a"], [1])], parameters={"truncation": "sideways"}),
                     "truncation")
        self.invalid(o.infer_request("classify", [("TEXT", ["a"], [1])], outputs=["LOGITS"]), "LOGITS")
        self.invalid(o.infer_request("nope", [("TEXT", ["a"], [1])]), "nope", code=grpc.StatusCode.NOT_FOUND)
        req = o.infer_request("classify", [("TEXT", ["a"], [1])])
        req.model_version = "0" * 16
        self.invalid(req, "version", code=grpc.StatusCode.NOT_FOUND)
        # The empty text is refused by the request path's limits (counted under
        # the model, before tokenizing); none of the others reached a model.
        after = {m: self.stats(m) for m in ("classify", "answer", "rerank")}
        self.assertEqual(after["answer"], before["answer"])
        self.assertEqual(after["rerank"], before["rerank"])
        self.assertEqual(after["classify"][:3], before["classify"][:3], "no item was computed")
        self.assertEqual(after["classify"][3], before["classify"][3] + 1)

    # --------------------------------------------------- statistics, metrics --

    def test_statistics_count_the_calls(self):
        before = self.oip.ModelStatistics(oip.ModelStatisticsRequest(name="classify"), timeout=10).model_stats[0]
        for _ in range(2):
            self.infer(o.infer_request("classify", [("TEXT", o.TEXTS, [3])]))
        after = self.oip.ModelStatistics(oip.ModelStatisticsRequest(name="classify"), timeout=10).model_stats[0]
        self.assertEqual(after.name, "classify")
        self.assertEqual(after.version, self.versions["classify"])
        self.assertEqual(after.inference_stats.success.count, before.inference_stats.success.count + 2)
        self.assertGreater(after.inference_stats.success.ns, before.inference_stats.success.ns)
        self.assertEqual(after.inference_count, before.inference_count + 6)
        self.assertGreaterEqual(after.execution_count, before.execution_count + 2)
        self.assertEqual(after.inference_stats.compute_infer.count, after.execution_count)
        self.assertGreater(after.inference_stats.compute_infer.ns, before.inference_stats.compute_infer.ns)
        self.assertEqual(after.inference_stats.queue.count, before.inference_stats.queue.count + 6)
        self.assertGreaterEqual(after.last_inference, before.last_inference)
        self.assertGreater(after.last_inference, 0)
        every = self.oip.ModelStatistics(oip.ModelStatisticsRequest(), timeout=10)
        self.assertEqual({s.name for s in every.model_stats}, {"classify", "answer", "rerank"})

    def test_metrics_protocol_oip(self):
        self.infer(o.infer_request("rerank", [("QUERY", [o.QUERY], [1]), ("DOCUMENTS", o.DOCUMENTS[:2], [2])]))
        samples = self.server.metrics()
        self.assertGreater(e2e.metric_value(samples, "dserve_requests_total", model="rerank", code="OK",
                                            protocol="oip"), 0)
        self.assertTrue(e2e.has_sample(samples, "dserve_request_duration_seconds_count", model="rerank",
                                       protocol="oip"))
        refused = lambda: e2e.metric_value(self.server.metrics(), "dserve_requests_total", model="",
                                           code="INVALID_ARGUMENT", protocol="oip")
        before = refused()
        self.invalid(o.infer_request("rerank", [("QUERY", [o.QUERY], [1])]), "DOCUMENTS")
        self.assertEqual(refused(), before + 1)

    # -------------------------------------------------------------- Node --

    def test_node_grpc_js_client_per_task(self):
        """@grpc/grpc-js + @grpc/proto-loader (tests/e2e/oip_node) load the
        test proto and call ModelInfer once per task; the values equal v1's."""
        node_dir = os.path.join(e2e.SOURCE, "tests", "e2e", "oip_node")
        node = shutil.which("node") or shutil.which("nodejs")
        modules = os.path.join(node_dir, "node_modules", "@grpc", "grpc-js")
        if node is None or not os.path.isdir(modules):
            self.fail("node or tests/e2e/oip_node/node_modules missing: run deploy/install-deps.sh "
                      "(npm ci --prefix tests/e2e/oip_node)")
        out = subprocess.run([node, os.path.join(node_dir, "oip_infer.js"), self.server.target,
                              os.path.join(e2e.SOURCE, "tests", "oip")],
                             input=json.dumps({"texts": o.TEXTS, "question": o.QUESTION, "contexts": o.CONTEXTS,
                                               "query": o.QUERY, "documents": o.DOCUMENTS}),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout)
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=o.TEXTS), timeout=60)
        self.check_classify({k: tuple(v) for k, v in got["classify"].items()}, want)
        want = self.v1.Answer(pb.AnswerRequest(model="answer", question=o.QUESTION, contexts=o.CONTEXTS), timeout=60)
        self.check_answer({k: tuple(v) for k, v in got["answer"].items()}, want)
        want = self.v1.Rerank(pb.RerankRequest(model="rerank", query=o.QUERY, documents=o.DOCUMENTS), timeout=60)
        scores = got["rerank"]["SCORES"][2]
        for d in want.results:
            self.assertAlmostEqual(scores[d.index], d.score, delta=TOL)


class OipGrpcAuthDrainTest(unittest.TestCase):
    """Bearer token on ModelInfer and metadata (health stays open); SIGTERM:
    the accepted call finishes, then the server exits 0."""

    def test_auth(self):
        folder = e2e.scratch_dir("oip-auth")
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        server = e2e.ServerProcess({"classify": e2e.test_models()["classify"]}, ["--auth-token-file", token_file],
                                   name="oip-auth").start()
        try:
            stub = o.stub(server)
            req = o.infer_request("classify", [("TEXT", ["refund please"], [1])])
            for call in (lambda md: stub.ModelInfer(req, timeout=30, metadata=md),
                         lambda md: stub.ModelMetadata(oip.ModelMetadataRequest(name="classify"), timeout=30,
                                                       metadata=md)):
                with self.assertRaises(grpc.RpcError) as ctx:
                    call(())
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                with self.assertRaises(grpc.RpcError) as ctx:
                    call((("authorization", "Bearer wrong"),))
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                call((("authorization", "Bearer " + TOKEN),))
            self.assertTrue(stub.ServerLive(oip.ServerLiveRequest(), timeout=10).live)
            self.assertTrue(stub.ServerReady(oip.ServerReadyRequest(), timeout=10).ready)
            self.assertTrue(stub.ModelReady(oip.ModelReadyRequest(name="classify"), timeout=10).ready)
        finally:
            server.stop()

    def test_drain_finishes_accepted_calls(self):
        hold = e2e.WorkerHold("oip-drain")
        server = e2e.ServerProcess({"classify": e2e.test_models()["classify"]},
                                   ["--workers", "1", "--drain-timeout-s", "30"], name="oip-drain",
                                   env=hold.env()).start()
        try:
            stub = o.stub(server)
            stub.ModelInfer(o.infer_request("classify", [("TEXT", ["warm"], [1])]), timeout=60)
            batches = lambda: e2e.metric_value(server.metrics(), "dserve_batch_size_count", model="classify")
            before = batches()
            hold.hold()
            result = {}

            def call():
                try:
                    result["r"] = stub.ModelInfer(o.infer_request("classify", [("TEXT", o.TEXTS, [3])]), timeout=90)
                except grpc.RpcError as e:
                    result["e"] = e

            t = threading.Thread(target=call)
            t.start()
            e2e.wait_until("the held worker to take the OIP call", lambda: batches() == before + 1, server=server)
            server.terminate()
            e2e.wait_until("the drain to refuse new calls", lambda: server.proc.poll() is not None or
                           self._refused(server), server=server)
            self.assertTrue(t.is_alive(), "the worker is held: the accepted call still waits")
            hold.release()
            t.join(60)
            self.assertNotIn("e", result, result.get("e"))
            self.assertEqual(o.outputs_of(result["r"])["PROBABILITIES"][1], [3, len(e2e.CLASSIFY_LABELS)])
            self.assertEqual(server.wait(40), 0, server.log_tail())
        finally:
            hold.release()
            server.stop()

    @staticmethod
    def _refused(server):
        # After SIGTERM new calls are refused: UNAVAILABLE (draining, or the
        # listener closed by GOAWAY).
        try:
            channel = server.channel()
            o.stub(server, channel).ModelInfer(o.infer_request("classify", [("TEXT", ["late"], [1])]), timeout=5)
            channel.close()
            return False
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAVAILABLE


if __name__ == "__main__":
    unittest.main()
