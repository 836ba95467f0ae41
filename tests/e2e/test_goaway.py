"""GOAWAY on drain and --max-connection-age-s (issue 16, defect 4), observed
from a separate client process (Python grpcio).

How GOAWAY shows in a client: the connection that received it takes no new
calls, so the channel leaves READY (grpc core moves the subchannel to IDLE or
TRANSIENT_FAILURE the moment the GOAWAY frame arrives, while streams already
open on that connection go on). The tests record every connectivity change
of a channel with its time (channel.subscribe), and keep calls in flight
deterministically with the worker hold hook (e2e.WorkerHold).

Before the fix, SIGTERM sent no GOAWAY until the whole drain had finished
(grpc::Server::Shutdown ran after the pools drained), so with a call held in
flight the channel stayed READY for as long as the hold lasted; and there was
no --max-connection-age-s (start-up failed on the unknown flag).
"""
import threading
import time
import unittest

import e2e_support as e2e
from e2e_support import grpc, pb

READY = grpc.ChannelConnectivity.READY


def classify_request(text="please refund my order"):
    return pb.ClassifyRequest(model="classify", texts=[text])


class ConnectivityLog:
    """Every connectivity state of a channel, with the monotonic time it was
    reported (the callbacks run on grpcio's polling thread)."""

    def __init__(self, channel):
        self.channel = channel
        self.events = []
        self._lock = threading.Lock()
        channel.subscribe(self._on_change, try_to_connect=False)

    def _on_change(self, state):
        with self._lock:
            self.events.append((time.monotonic(), state))

    def close(self):
        self.channel.unsubscribe(self._on_change)

    def states(self):
        with self._lock:
            return [s for _, s in self.events]

    def first_left_ready_after(self, t0):
        """Time of the first non-READY state reported after `t0`, or None."""
        with self._lock:
            for t, s in self.events:
                if t >= t0 and s != READY:
                    return t
        return None

    def ready_exits(self):
        """How many times the channel went from READY to another state."""
        with self._lock:
            states = [s for _, s in self.events]
        return sum(1 for a, b in zip(states, states[1:]) if a == READY and b != READY)


class GoawayOnDrainTest(unittest.TestCase):
    """SIGTERM with calls in flight: GOAWAY within 100 ms of the signal (the
    channel leaves READY) while the calls, held by the worker, are still
    running; released, they finish OK and the server exits 0."""

    DRAIN_TIMEOUT_S = 30
    GOAWAY_WITHIN_S = 0.1

    def setUp(self):
        self.hold = e2e.WorkerHold("goaway")
        self.server = e2e.ServerProcess({"classify": e2e.test_models()["classify"]}, [
            "--workers", "1", "--threads-per-worker", "1", "--max-batch-size", "1",
            "--drain-timeout-s", str(self.DRAIN_TIMEOUT_S)], name="goaway", env=self.hold.env()).start()

    def tearDown(self):
        self.hold.release()
        self.server.stop()

    def test_sigterm_sends_goaway_at_once_while_calls_finish(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        stub.Classify(classify_request(), timeout=30)  # warm-up: the channel is READY
        log = ConnectivityLog(channel)
        e2e.wait_until("the channel to report READY", lambda: log.states()[-1:] == [READY], server=self.server)

        self.hold.hold()
        futures = [stub.Classify.future(classify_request(), timeout=120) for _ in range(2)]
        # One call held by the worker, the other queued: both certainly in flight.
        e2e.wait_until("one call held and one queued", lambda: e2e.metric_value(
            self.server.metrics(), "dserve_queue_items", model="classify") == 1, server=self.server)

        signalled = time.monotonic()
        self.server.terminate()
        # Generous wait: a server that sends GOAWAY only after the drain never
        # leaves READY while the hold lasts.
        try:
            e2e.wait_until("the channel to leave READY (GOAWAY) after SIGTERM",
                           lambda: log.first_left_ready_after(signalled) is not None, timeout_s=3)
        except AssertionError as e:
            self.fail("%s; states seen: %s; calls done: %s" % (e, log.states(), [f.done() for f in futures]))
        goaway_after = log.first_left_ready_after(signalled) - signalled
        print("\nGOAWAY seen %.1f ms after SIGTERM; states: %s" % (goaway_after * 1000, log.states()))
        self.assertLess(goaway_after, self.GOAWAY_WITHIN_S * e2e.TIME_FACTOR)
        self.assertEqual([f.done() for f in futures], [False, False], "the worker is held: no call can be done")
        self.assertTrue(self.server.running())

        # A new call on the same channel fails fast (no connection takes it),
        # never hangs or lands on the stopping server.
        started = time.monotonic()
        with self.assertRaises(grpc.RpcError) as ctx:
            stub.Classify(classify_request(), timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE, ctx.exception.details())
        self.assertLess(time.monotonic() - started, 5)

        # The accepted calls finish, on the connection that got the GOAWAY.
        self.hold.release()
        for f in futures:
            self.assertEqual(len(f.result().results), 1)
        self.assertEqual(self.server.wait(self.DRAIN_TIMEOUT_S + 5), 0, self.server.log_tail())
        log.close()
        channel.close()


class MaxConnectionAgeTest(unittest.TestCase):
    """--max-connection-age-s 1: a long-lived channel gets a GOAWAY about
    every second and reconnects; calls keep succeeding throughout."""

    RUN_S = 3.5

    def setUp(self):
        self.server = e2e.ServerProcess({"classify": e2e.test_models()["classify"]}, [
            "--workers", "1", "--max-connection-age-s", "1", "--max-connection-age-grace-s", "5"],
            name="conn-age").start()

    def tearDown(self):
        self.server.stop()

    def test_long_lived_channel_reconnects(self):
        channel = self.server.channel()
        stub = self.server.stub(channel)
        stub.Classify(classify_request(), timeout=30)
        log = ConnectivityLog(channel)
        calls = 0
        end = time.monotonic() + self.RUN_S
        while time.monotonic() < end:
            response = stub.Classify(classify_request(), timeout=30)  # raises on any failure
            self.assertEqual(len(response.results), 1)
            calls += 1
            time.sleep(0.02)
        print("\n%d calls over %.1f s, all OK; the channel left READY %d times: %s"
              % (calls, self.RUN_S, log.ready_exits(), log.states()))
        self.assertGreaterEqual(log.ready_exits(), 1, "no GOAWAY seen: %s" % log.states())
        # Still serving on a fresh connection.
        self.assertEqual(len(stub.Classify(classify_request(), timeout=30).results), 1)
        log.close()
        channel.close()


if __name__ == "__main__":
    unittest.main()
