"""Dynamic batching, overload, deadlines and graceful drain, observed from
outside: client status codes plus the server's /metrics."""
import subprocess
import threading
import time
import unittest

import grpc

import e2e_support as e2e
from e2e_support import pb, health_pb2, health_pb2_grpc

SENTENCE = "The baker next door sells bread, rolls, and small cakes with honey on top."
MEDIUM_TEXT = " ".join([SENTENCE] * 4)    # about 100 tokens
LONG_TEXT = " ".join([SENTENCE] * 12)     # truncated to the model's 256 tokens


def classify_request(text=SENTENCE, n=1):
    return pb.ClassifyRequest(model="classify", texts=[text] * n)


def classify_only():
    return {"classify": e2e.test_models()["classify"]}


class ConcurrentClientsFormBatchesTest(unittest.TestCase):
    """(a) 24 concurrent clients -> mean formed batch > 1.5 items."""

    CLIENTS = 24
    DURATION_S = 3.0

    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(classify_only(), ["--workers", "1", "--threads-per-worker", "1",
                                                         "--max-batch-size", "32"], name="batching").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_mean_batch_size_under_24_clients(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        stub.Classify(classify_request(), timeout=30)  # warm-up
        before = self.server.metrics()
        codes, lock = [], threading.Lock()
        stop_at = time.monotonic() + self.DURATION_S

        def client():
            mine = []
            while time.monotonic() < stop_at:
                try:
                    stub.Classify(classify_request(MEDIUM_TEXT), timeout=30)
                    mine.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    mine.append(e.code())
            with lock:
                codes.extend(mine)

        threads = [threading.Thread(target=client) for _ in range(self.CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        channel.close()
        after = self.server.metrics()

        self.assertGreater(len(codes), self.CLIENTS)
        self.assertEqual(set(codes), {grpc.StatusCode.OK})
        batches = (e2e.metric_value(after, "dserve_batch_size_count", model="classify")
                   - e2e.metric_value(before, "dserve_batch_size_count", model="classify"))
        items = (e2e.metric_value(after, "dserve_batch_size_sum", model="classify")
                 - e2e.metric_value(before, "dserve_batch_size_sum", model="classify"))
        self.assertEqual(items, len(codes), "every request is one item, each run exactly once")
        mean = items / batches
        print("\n%d requests in %d batches: mean formed batch %.2f" % (len(codes), batches, mean))
        self.assertGreater(mean, 1.5)
        ok = (e2e.metric_value(after, "dserve_requests_total", model="classify", code="OK")
              - e2e.metric_value(before, "dserve_requests_total", model="classify", code="OK"))
        self.assertEqual(ok, len(codes))


class OverloadTest(unittest.TestCase):
    """(b) a small queue flooded -> only OK or RESOURCE_EXHAUSTED, then fine."""

    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(classify_only(), ["--workers", "1", "--threads-per-worker", "1",
                                                         "--max-queue-items", "4", "--max-batch-size", "2"],
                                       name="overload").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_flood_small_queue(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        stub.Classify(classify_request(), timeout=30)  # warm-up
        before = self.server.metrics()
        futures = [stub.Classify.future(classify_request(MEDIUM_TEXT), timeout=60) for _ in range(200)]
        codes = []
        for f in futures:
            try:
                f.result()
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self.assertIn("queue", e.details().lower())
        counts = {c: codes.count(c) for c in set(codes)}
        print("\nflood of 200: %s" % {c.name: n for c, n in counts.items()})
        self.assertLessEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED})
        self.assertGreater(counts.get(grpc.StatusCode.OK, 0), 0)
        self.assertGreater(counts.get(grpc.StatusCode.RESOURCE_EXHAUSTED, 0), 0)

        # A normal request right after is served at once.
        started = time.monotonic()
        resp = stub.Classify(classify_request(), timeout=10)
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertEqual(len(resp.results), 1)

        after = self.server.metrics()
        rejected = (e2e.metric_value(after, "dserve_rejected_total", model="classify", reason="queue_full")
                    - e2e.metric_value(before, "dserve_rejected_total", model="classify", reason="queue_full"))
        self.assertEqual(rejected, counts[grpc.StatusCode.RESOURCE_EXHAUSTED])
        exhausted = (e2e.metric_value(after, "dserve_requests_total", model="classify", code="RESOURCE_EXHAUSTED")
                     - e2e.metric_value(before, "dserve_requests_total", model="classify",
                                        code="RESOURCE_EXHAUSTED"))
        self.assertEqual(exhausted, counts[grpc.StatusCode.RESOURCE_EXHAUSTED])
        self.assertEqual(e2e.metric_value(after, "dserve_queue_items", model="classify"), 0)
        channel.close()

        # The scrape with rejections in it still passes promtool.
        text = self.server.scrape()
        self.assertIn("# TYPE dserve_rejected_total counter", text)
        out = subprocess.run([e2e.PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


class SustainedFloodTest(unittest.TestCase):
    """(b') many threads flood a small queue for seconds: only OK or
    RESOURCE_EXHAUSTED; an accepted call waits at most for the batches ahead
    of it plus the queue delay; memory stays flat; service is normal at once
    when the flood stops."""

    QUEUE_ITEMS, BATCH, QUEUE_DELAY_US = 4, 2, 2000
    THREADS, DURATION_S = 32, 3.0 * e2e.TIME_FACTOR

    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(classify_only(), [
            "--workers", "1", "--threads-per-worker", "1", "--max-queue-items", str(cls.QUEUE_ITEMS),
            "--max-batch-size", str(cls.BATCH), "--max-queue-delay-us", str(cls.QUEUE_DELAY_US)],
            name="flood").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_flood_from_many_threads(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        for _ in range(3):
            stub.Classify(classify_request(MEDIUM_TEXT), timeout=30)  # warm-up
        pid = self.server.proc.pid
        rss_start = rss_bytes(pid)
        rss_samples, results, lock = [], [], threading.Lock()
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                rss_samples.append(rss_bytes(pid))
                time.sleep(0.05)

        def flooder():
            mine = []
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    resp = stub.Classify(classify_request(MEDIUM_TEXT), timeout=30)
                    mine.append((grpc.StatusCode.OK, time.monotonic() - sent, resp.timing))
                except grpc.RpcError as e:
                    mine.append((e.code(), time.monotonic() - sent, e.details()))
            with lock:
                results.extend(mine)

        threads = [threading.Thread(target=flooder) for _ in range(self.THREADS)] + [threading.Thread(target=sampler)]
        for t in threads:
            t.start()
        time.sleep(self.DURATION_S)
        stop.set()
        for t in threads:
            t.join()

        # Recovery: served at once, one call after the other.
        recovery = []
        for _ in range(5):
            sent = time.monotonic()
            resp = stub.Classify(classify_request(MEDIUM_TEXT), timeout=10)
            recovery.append(time.monotonic() - sent)
            self.assertEqual(len(resp.results), 1)
        rss_end = rss_bytes(pid)
        after = self.server.metrics()
        channel.close()

        codes = [r[0] for r in results]
        counts = {c.name: codes.count(c) for c in set(codes)}
        ok = [r for r in results if r[0] == grpc.StatusCode.OK]
        max_inference_us = max(r[2].inference_us for r in ok)
        bound_us = (2 + -(-self.QUEUE_ITEMS // self.BATCH)) * max_inference_us + self.QUEUE_DELAY_US
        slack_us = 100000  # thread scheduling on a busy 2-core machine
        worst_queue_us = max(r[2].queue_us for r in ok)
        extra_us = sorted(r[2].total_us - r[2].queue_us - r[2].inference_us for r in ok)
        worst_extra_us = extra_us[-1]
        p99_extra_us = extra_us[int(len(extra_us) * 0.99)]
        client = sorted(r[1] for r in ok)
        print("\nflood of %d threads for %.0f s: %s; accepted: queue wait max %.1f ms (bound %.1f ms), "
              "extra (tokenize + decode) p99 %.1f ms max %.1f ms, client p50 %.1f ms p99 %.1f ms; recovery calls %s ms; RSS start %.1f MiB, max %.1f MiB, end %.1f MiB"
              % (self.THREADS, self.DURATION_S, counts, worst_queue_us / 1e3, bound_us / 1e3,
                 p99_extra_us / 1e3, worst_extra_us / 1e3, 1e3 * client[len(client) // 2], 1e3 * client[int(len(client) * 0.99)],
                 [round(1e3 * r, 1) for r in recovery], rss_start / 2**20, max(rss_samples) / 2**20,
                 rss_end / 2**20))

        self.assertLessEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED})
        self.assertGreater(counts.get("OK", 0), self.THREADS)
        self.assertGreater(counts.get("RESOURCE_EXHAUSTED", 0), self.THREADS)
        # Accepted calls: waited at most for the running batch and the queue ahead.
        self.assertLessEqual(worst_queue_us, bound_us + slack_us)
        # ... and spent nothing else but tokenizing and decoding: 99% within the
        # slack, and none more than 5x it. A single call can lose a scheduler
        # slice or two when the 32 flooders share 2 cores with other work
        # (134 ms seen once beside a training job); a real wait inside the
        # request path (a lock held across a batch) shows in the p99.
        self.assertLess(p99_extra_us, slack_us)
        self.assertLess(worst_extra_us, 5 * slack_us)
        # Memory stays bounded (rejected calls hold nothing).
        self.assertLess(max(rss_samples) - rss_start, (64 << 20) + e2e.RSS_SLACK)
        self.assertLess(rss_end - rss_start, (64 << 20) + e2e.RSS_SLACK)
        self.assertLess(max(recovery), 1.0)
        self.assertEqual(e2e.metric_value(after, "dserve_queue_items", model="classify"), 0)
        self.assertEqual(e2e.metric_value(after, "dserve_rejected_total", model="classify", reason="queue_full"),
                         counts["RESOURCE_EXHAUSTED"])


class DeadlineTest(unittest.TestCase):
    """(c) requests whose deadline passes while queued are dropped before
    compute. The only worker is held (e2e.WorkerHold) with the big request's
    first item, so the short requests certainly expire in the queue: no
    sleep, no race with the machine's speed."""

    BIG = 128
    SHORT = 5

    @classmethod
    def setUpClass(cls):
        cls.hold = e2e.WorkerHold("deadline")
        cls.server = e2e.ServerProcess(classify_only(), ["--workers", "1", "--threads-per-worker", "1",
                                                         "--max-batch-size", "1", "--max-queue-items", "100000"],
                                       name="deadline", env=cls.hold.env()).start()

    @classmethod
    def tearDownClass(cls):
        cls.hold.release()
        cls.server.stop()

    def queued(self):
        return e2e.metric_value(self.server.metrics(), "dserve_queue_items", model="classify")

    def test_expired_items_dropped_before_compute(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        stub.Classify(classify_request(), timeout=30)  # warm-up
        before = self.server.metrics()
        self.hold.hold()
        try:
            # The worker takes the big request's first item and holds it; the
            # other BIG - 1 items stay queued.
            big = stub.Classify.future(classify_request(LONG_TEXT, self.BIG), timeout=120)
            e2e.wait_until("the big request's items queued behind the held worker",
                           lambda: self.queued() == self.BIG - 1, server=self.server)
            codes = []
            for _ in range(self.SHORT):
                try:
                    stub.Classify(classify_request(LONG_TEXT), timeout=0.05)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
            self.assertFalse(big.done(), "the worker is held: the big request cannot have finished")
        finally:
            self.hold.release()
        self.assertEqual(codes, [grpc.StatusCode.DEADLINE_EXCEEDED] * self.SHORT)
        self.assertEqual(len(big.result().results), self.BIG)

        def delta(samples, name, **labels):
            return e2e.metric_value(samples, name, **labels) - e2e.metric_value(before, name, **labels)

        # The server counts the short calls once they reach their end (gRPC
        # finishes them at the deadline, the scheduler drops their items at
        # its next decision): wait for that state rather than a fixed time.
        e2e.wait_until("the server to count %d deadline drops and an empty queue" % self.SHORT, lambda: (
            delta(self.server.metrics(), "dserve_requests_total", model="classify", code="DEADLINE_EXCEEDED")
            >= self.SHORT and self.queued() == 0), server=self.server)
        after = self.server.metrics()
        # Dropped before compute: only the big request's items ran.
        self.assertEqual(delta(after, "dserve_batch_size_sum", model="classify"), self.BIG)
        # ... and counted as deadline drops (they expired while queued; that
        # gRPC also marks such calls cancelled must not change the reason).
        seen = "rejected by reason: %s; requests by code: %s" % (
            {r: delta(after, "dserve_rejected_total", model="classify", reason=r)
             for r in ("deadline", "cancelled", "queue_full", "draining")},
            {c: delta(after, "dserve_requests_total", model="classify", code=c)
             for c in ("OK", "DEADLINE_EXCEEDED", "CANCELLED")})
        self.assertEqual(delta(after, "dserve_rejected_total", model="classify", reason="deadline"), self.SHORT, seen)
        self.assertEqual(delta(after, "dserve_requests_total", model="classify", code="DEADLINE_EXCEEDED"),
                         self.SHORT, seen)
        self.assertEqual(delta(after, "dserve_requests_total", model="classify", code="OK"), 1, seen)
        channel.close()


class DrainTest(unittest.TestCase):
    """(d) SIGTERM with calls in flight: none lost, exit 0, new calls refused.
    The worker is held (e2e.WorkerHold) while SIGTERM arrives, so every call
    is certainly still queued or running then; released, all of them finish."""

    CALLS = 20
    ITEMS = 16
    BATCH = 4
    DRAIN_TIMEOUT_S = 30

    def setUp(self):
        self.hold = e2e.WorkerHold("drain")
        self.server = e2e.ServerProcess(classify_only(), [
            "--workers", "1", "--threads-per-worker", "1", "--max-batch-size", str(self.BATCH),
            "--drain-timeout-s", str(self.DRAIN_TIMEOUT_S)], name="drain", env=self.hold.env()).start()

    def tearDown(self):
        self.hold.release()
        self.server.stop()

    def health(self, health):
        try:
            return health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
        except grpc.RpcError as e:
            return e.code()

    def test_sigterm_with_calls_in_flight(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        stub.Classify(classify_request(), timeout=30)  # warm-up
        self.assertEqual(self.health(health), health_pb2.HealthCheckResponse.SERVING)
        self.hold.hold()
        futures = [stub.Classify.future(classify_request(MEDIUM_TEXT, self.ITEMS), timeout=120)
                   for _ in range(self.CALLS)]
        # Every call accepted: one batch held by the worker, the rest queued.
        e2e.wait_until("all %d calls accepted" % self.CALLS, lambda: e2e.metric_value(
            self.server.metrics(), "dserve_queue_items", model="classify") == self.CALLS * self.ITEMS - self.BATCH,
            server=self.server)
        sent_at = time.monotonic()
        self.server.terminate()
        # Drain has begun once health stops saying SERVING.
        e2e.wait_until("health to leave SERVING after SIGTERM",
                       lambda: self.health(health) != health_pb2.HealthCheckResponse.SERVING, server=self.server)
        # GOAWAY goes out at drain start (issue 16): a call that races it on
        # this connection is refused by the transport (UNAVAILABLE) or
        # cancelled by the server's shutdown (CANCELLED), never served late.
        refused = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        self.assertIn(self.health(health), (health_pb2.HealthCheckResponse.NOT_SERVING,) + refused)

        # New work is refused, never left hanging.
        with self.assertRaises(grpc.RpcError) as ctx:
            stub.Classify(classify_request(), timeout=10)
        self.assertIn(ctx.exception.code(), refused, ctx.exception.details())
        still_running = sum(not f.done() for f in futures)
        self.assertEqual(still_running, self.CALLS, "the worker is held: no accepted call can have finished")
        self.assertTrue(self.server.running())

        self.hold.release()
        codes = []
        for f in futures:
            try:
                self.assertEqual(len(f.result().results), self.ITEMS)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append((e.code(), e.details()))
        self.assertEqual(codes, [grpc.StatusCode.OK] * self.CALLS)
        self.assertEqual(self.server.wait(self.DRAIN_TIMEOUT_S + 5), 0, self.server.log_tail())
        self.assertLess(time.monotonic() - sent_at, self.DRAIN_TIMEOUT_S + 5)
        print("\n%d calls in flight at SIGTERM, all finished; exit after %.2f s"
              % (still_running, time.monotonic() - sent_at))
        channel.close()

        # After exit: a fresh connection fails fast.
        fresh = self.server.channel()
        with self.assertRaises(grpc.RpcError) as ctx:
            self.server.stub(fresh).Classify(classify_request(), timeout=5)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
        fresh.close()


if __name__ == "__main__":
    unittest.main()
