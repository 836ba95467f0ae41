"""Bearer-token auth, TLS and mutual TLS."""
import os
import socket
import threading
import time
import unittest

import grpc

import e2e_support as e2e
from e2e_support import pb, health_pb2, health_pb2_grpc

TOKEN = "s3cret-e2e-token"
REQUEST = pb.ClassifyRequest(model="classify", texts=["please refund my order"])


def classify_only():
    return {"classify": e2e.test_models()["classify"]}


class TokenAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder = e2e.scratch_dir("auth")
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.server = e2e.ServerProcess(classify_only(), ["--auth-token-file", token_file], name="auth").start()
        cls.channel = cls.server.channel()
        cls.stub = cls.server.stub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def assert_unauthenticated(self, call, request, metadata):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(request, metadata=metadata, timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED, ctx.exception.details())

    def test_no_token(self):
        self.assert_unauthenticated(self.stub.Classify, REQUEST, None)
        self.assert_unauthenticated(self.stub.ListModels, pb.ListModelsRequest(), None)

    def test_wrong_token(self):
        for value in ("Bearer wrong", "Bearer " + TOKEN + "x", "Bearer " + TOKEN[:-1], "Basic " + TOKEN, TOKEN,
                      "Bearer"):
            with self.subTest(authorization=value):
                self.assert_unauthenticated(self.stub.Classify, REQUEST, [("authorization", value)])

    def test_right_token(self):
        resp = self.stub.Classify(REQUEST, metadata=[("authorization", "Bearer " + TOKEN)], timeout=30)
        self.assertEqual(len(resp.results[0].labels), 5)
        models = self.stub.ListModels(pb.ListModelsRequest(), metadata=[("authorization", "Bearer " + TOKEN)],
                                      timeout=10)
        self.assertEqual([m.name for m in models.models], ["classify"])

    def test_health_needs_no_token(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        for service in ("", "dserve.v1.Inference", "classify"):
            with self.subTest(service=service):
                resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = e2e.make_certs(e2e.scratch_dir("tls"))
        cls.server = e2e.ServerProcess(classify_only(), ["--tls-cert", cls.certs["server_cert"],
                                                         "--tls-key", cls.certs["server_key"]], name="tls").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def tls_channel(self, ca="ca_cert", client=False, client_name="client"):
        creds = grpc.ssl_channel_credentials(
            root_certificates=e2e.read_bytes(self.certs[ca]),
            private_key=e2e.read_bytes(self.certs[client_name + "_key"]) if client else None,
            certificate_chain=e2e.read_bytes(self.certs[client_name + "_cert"]) if client else None)
        return grpc.secure_channel(self.server.target, creds,
                                   options=[("grpc.ssl_target_name_override", "localhost")])

    def test_tls_client_with_ca(self):
        with self.tls_channel() as channel:
            resp = e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=30)
            self.assertEqual(len(resp.results[0].labels), 5)

    def test_plaintext_client_fails(self):
        with self.server.channel() as channel:
            with self.assertRaises(grpc.RpcError) as ctx:
                e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=5)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_client_with_unrelated_ca_fails(self):
        with self.tls_channel(ca="other_ca_cert") as channel:
            with self.assertRaises(grpc.RpcError) as ctx:
                e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=5)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)


class MutualTlsTest(TlsTest):
    @classmethod
    def setUpClass(cls):
        cls.certs = e2e.make_certs(e2e.scratch_dir("mtls"))
        cls.server = e2e.ServerProcess(classify_only(), [
            "--tls-cert", cls.certs["server_cert"], "--tls-key", cls.certs["server_key"],
            "--tls-client-ca", cls.certs["ca_cert"]], name="mtls").start()

    def test_tls_client_with_ca(self):
        # Without a client certificate the handshake fails.
        with self.tls_channel() as channel:
            with self.assertRaises(grpc.RpcError) as ctx:
                e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=5)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_client_certificate_accepted(self):
        with self.tls_channel(client=True) as channel:
            resp = e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=30)
            self.assertEqual(len(resp.results[0].labels), 5)

    def test_client_certificate_from_unrelated_ca_rejected(self):
        with self.tls_channel(client=True, client_name="other_client") as channel:
            with self.assertRaises(grpc.RpcError) as ctx:
                e2e.pb_grpc.InferenceStub(channel).Classify(REQUEST, timeout=5)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)


class TlsWithTokenTest(unittest.TestCase):
    """TLS and the bearer token together: the token is still required on
    an encrypted channel; health stays open."""

    @classmethod
    def setUpClass(cls):
        folder = e2e.scratch_dir("tls-token")
        cls.certs = e2e.make_certs(folder)
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.server = e2e.ServerProcess(classify_only(), [
            "--tls-cert", cls.certs["server_cert"], "--tls-key", cls.certs["server_key"],
            "--auth-token-file", token_file], name="tls-token").start()
        creds = grpc.ssl_channel_credentials(root_certificates=e2e.read_bytes(cls.certs["ca_cert"]))
        cls.channel = grpc.secure_channel(cls.server.target, creds,
                                          options=[("grpc.ssl_target_name_override", "localhost")])
        cls.stub = e2e.pb_grpc.InferenceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def test_token_required_over_tls(self):
        for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", "Basic " + TOKEN)]):
            with self.subTest(metadata=metadata):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.stub.Classify(REQUEST, metadata=metadata, timeout=10)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        resp = self.stub.Classify(REQUEST, metadata=[("authorization", "Bearer " + TOKEN)], timeout=30)
        self.assertEqual(len(resp.results[0].labels), 5)

    def test_health_over_tls_needs_no_token(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        resp = health.Check(health_pb2.HealthCheckRequest(service="classify"), timeout=10)
        self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)


class MetricsEndpointTest(unittest.TestCase):
    """/metrics serves one connection at a time: a client trickling its
    request (or never sending it) holds it for 2 s at most."""

    @classmethod
    def setUpClass(cls):
        cls.server = e2e.ServerProcess(classify_only(), name="metrics-slow").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_trickling_client_cannot_hold_metrics(self):
        stop = threading.Event()
        sock = socket.create_connection(("127.0.0.1", self.server.metrics_port), timeout=10)

        def trickle():
            sock.sendall(b"GET /metr")
            while not stop.wait(0.5):
                try:
                    sock.sendall(b"i")
                except OSError:
                    return

        thread = threading.Thread(target=trickle)
        thread.start()
        try:
            time.sleep(0.2)
            started = time.monotonic()
            text = self.server.scrape()
            waited = time.monotonic() - started
        finally:
            stop.set()
            thread.join()
            sock.close()
        self.assertIn("dserve_build_info", text)
        self.assertLess(waited, 4.0)


if __name__ == "__main__":
    unittest.main()
