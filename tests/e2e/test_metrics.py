"""/metrics after traffic: `promtool check metrics` passes, every metric of
DESIGN section 3 is there, and the counters agree with the traffic sent."""
import re
import subprocess
import time
import unittest

import grpc

import e2e_support as e2e
from e2e_support import pb

DESIGN_METRICS = [
    "dserve_requests_total", "dserve_request_duration_seconds", "dserve_queue_duration_seconds",
    "dserve_inference_duration_seconds", "dserve_batch_size", "dserve_batch_tokens", "dserve_batch_real_tokens",
    "dserve_queue_items", "dserve_rejected_total", "dserve_tokens_total", "dserve_answer_no_answer_total",
    "dserve_model_info", "dserve_build_info", "process_cpu_seconds_total", "process_resident_memory_bytes",
]
HISTOGRAMS = ["dserve_request_duration_seconds", "dserve_queue_duration_seconds",
              "dserve_inference_duration_seconds", "dserve_batch_size", "dserve_batch_tokens",
              "dserve_batch_real_tokens"]
TEXTS = ["I was charged twice", "reset my password please", "where is my parcel"]
QUESTION = "Who sells bread?"
CONTEXT = "The baker next door sells bread, rolls, and small cakes with honey on top."


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(e2e.test_models(), name="metrics").start()
        channel = cls.server.channel()
        stub = cls.server.stub(channel)
        cls.classify_tokens = 0
        for i in range(3):
            stub.Classify(pb.ClassifyRequest(model="classify", texts=TEXTS[:i + 1]), timeout=30)
            cls.classify_tokens += sum(len(e2e.single_ids(t)) for t in TEXTS[:i + 1])
        cls.no_answers = 0
        for threshold in (-1000.0, 1000.0):  # one no_answer, one answer
            r = stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=[CONTEXT],
                                             null_score_diff_threshold=threshold), timeout=30)
            cls.no_answers += int(r.no_answer)
        stub.Rerank(pb.RerankRequest(model="rerank", query="bread", documents=[CONTEXT, "fish"]), timeout=30)
        for model in ("nope", "answer"):
            try:
                stub.Classify(pb.ClassifyRequest(model=model, texts=["x"]), timeout=30)
            except grpc.RpcError:
                pass
        stub.ListModels(pb.ListModelsRequest(), timeout=10)
        channel.close()
        cls.text = cls.server.scrape()
        cls.samples = e2e.parse_prometheus(cls.text)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_promtool_check_metrics(self):
        out = subprocess.run([e2e.PROMTOOL, "check", "metrics"], input=self.text, capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(out.returncode, 0, "promtool check metrics:\n%s%s" % (out.stdout, out.stderr))
        self.assertEqual((out.stdout + out.stderr).strip(), "")

    def test_every_design_metric_is_exposed(self):
        # A family with no series yet is not printed at all, so a metric must
        # exist (at 0) before its first event for the scrape to list it.
        types = dict(re.findall(r"(?m)^# TYPE (\S+) (\S+)$", self.text))
        for name in DESIGN_METRICS:
            with self.subTest(metric=name):
                self.assertIn(name, types, "families exposed: %s" % sorted(types))
                self.assertEqual(types[name], "histogram" if name in HISTOGRAMS else
                                 "counter" if name.endswith("_total") else "gauge")
                sample = name + "_count" if name in HISTOGRAMS else name
                self.assertTrue(e2e.has_sample(self.samples, sample), sample)

    def test_counters_match_traffic(self):
        v = lambda name, **labels: e2e.metric_value(self.samples, name, **labels)  # noqa: E731
        self.assertEqual(v("dserve_requests_total", model="classify", task="classify", code="OK"), 3)
        self.assertEqual(v("dserve_requests_total", model="answer", task="answer", code="OK"), 2)
        self.assertEqual(v("dserve_requests_total", model="rerank", task="rerank", code="OK"), 1)
        self.assertEqual(v("dserve_requests_total", code="NOT_FOUND"), 1)
        self.assertEqual(v("dserve_requests_total", code="FAILED_PRECONDITION"), 1)
        self.assertEqual(v("dserve_request_duration_seconds_count", model="classify"), 3)
        self.assertEqual(v("dserve_tokens_total", model="classify"), self.classify_tokens)
        self.assertEqual(v("dserve_batch_real_tokens_sum", model="classify"), self.classify_tokens)
        self.assertEqual(v("dserve_batch_size_sum", model="classify"), 6)  # 1 + 2 + 3 texts
        self.assertGreaterEqual(v("dserve_batch_tokens_sum", model="classify"), self.classify_tokens)
        self.assertEqual(v("dserve_queue_duration_seconds_count", model="classify"), 6)
        self.assertEqual(v("dserve_inference_duration_seconds_count", model="classify"),
                         v("dserve_batch_size_count", model="classify"))
        self.assertEqual(v("dserve_answer_no_answer_total", model="answer"), self.no_answers)
        self.assertEqual(self.no_answers, 1)
        for model in ("classify", "answer", "rerank"):
            self.assertEqual(v("dserve_queue_items", model=model), 0)
            self.assertEqual(v("dserve_model_info", model=model, task=model, device="cpu", dtype="fp32"), 1)
        self.assertEqual(v("dserve_build_info"), 1)
        self.assertGreater(v("process_cpu_seconds_total"), 0)
        self.assertGreater(v("process_resident_memory_bytes"), 10e6)

    def test_every_model_was_warmed_up_before_serving(self):
        # Issue 16, defect 6: warm-up forwards ran at load (before health
        # said SERVING), timed in dserve_model_warmup_seconds and logged.
        log = self.server.log_tail(100000)
        for model in ("classify", "answer", "rerank"):
            warmup = e2e.metric_value(self.samples, "dserve_model_warmup_seconds", model=model)
            self.assertIsNotNone(warmup, model)
            self.assertGreater(warmup, 0.0, model)
            self.assertIn("model %s: warmed up in" % model, log)

    def test_process_start_time_is_the_same_in_every_scrape(self):
        # Issue 16, defect 7: it was recomputed per scrape from time(2) and
        # /proc/uptime and moved by up to a second (a restart, to a dashboard).
        values = set()
        for _ in range(5):
            values.add(e2e.metric_value(e2e.parse_prometheus(self.server.scrape()), "process_start_time_seconds"))
            time.sleep(0.03)  # /proc/uptime moves in hundredths; time(2) in seconds
        self.assertEqual(len(values), 1, values)

    def test_histogram_buckets_are_cumulative(self):
        for name in HISTOGRAMS:
            series = {}
            for n, labels, value in self.samples:
                if n == name + "_bucket":
                    key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
                    series.setdefault(key, []).append((float(labels["le"]), value))
            self.assertTrue(series, name)
            for key, buckets in series.items():
                values = [c for _, c in sorted(buckets)]
                self.assertEqual(values, sorted(values), (name, key))
                count = e2e.metric_value(self.samples, name + "_count", **dict(key))
                self.assertEqual(values[-1], count, (name, key))


if __name__ == "__main__":
    unittest.main()
