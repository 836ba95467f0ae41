"""DserveClient: a typed wrapper over the dserve.v1.Inference gRPC service.

Every method returns plain dataclasses (no protobuf objects) and raises
DserveError on failure. Calls that fail with UNAVAILABLE or
RESOURCE_EXHAUSTED are retried with exponential backoff and jitter, up to
`max_attempts` attempts in all; every other error is raised at once, and so
is a RESOURCE_EXHAUSTED for a message over gRPC's size limit ("message larger
than max"), which would fail the same way again.
"""
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import grpc

from ._stubs_loader import health_pb2, health_pb2_grpc, inference_pb2 as pb, inference_pb2_grpc as pb_grpc

# The channel's service config when no lb_policy is given: round_robin
# over every address the target resolves to.
DEFAULT_SERVICE_CONFIG = '{"loadBalancingConfig":[{"round_robin":{}}]}'

RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def is_retryable(code, details):
    """Whether a call that failed with `code` and `details` may succeed on
    another attempt (client/retry_policy.h has the same rule)."""
    if code not in RETRYABLE_CODES:
        return False
    return not (code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in (details or "").lower())

_TRUNCATION = {
    None: pb.TRUNCATION_UNSPECIFIED,
    "": pb.TRUNCATION_UNSPECIFIED,
    "unspecified": pb.TRUNCATION_UNSPECIFIED,
    "none": pb.TRUNCATION_NONE,
    "longest_first": pb.TRUNCATION_LONGEST_FIRST,
    "only_first": pb.TRUNCATION_ONLY_FIRST,
    "only_second": pb.TRUNCATION_ONLY_SECOND,
}


class DserveError(Exception):
    """A failed call. `code` is a grpc.StatusCode (code.name is e.g. "NOT_FOUND"),
    `message` the server's details, `request_id` the x-request-id of the call
    (from the server's trailer when it sent one, else the one this client sent)."""

    def __init__(self, code, message, request_id=None):
        super().__init__("%s: %s%s" % (getattr(code, "name", code), message,
                                       " (request id %s)" % request_id if request_id else ""))
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass
class LabelScore:
    label: str
    score: float


@dataclass
class Answer:
    text: str
    context_index: int
    start_char: int  # code-point offsets into contexts[context_index], end exclusive
    end_char: int
    score: float
    logit_score: float


@dataclass
class AnswerResult:
    answers: List[Answer]
    no_answer: bool
    no_answer_score: float
    null_score_diff: float
    model: str
    tokens: int = 0


@dataclass
class RankedDocument:
    index: int
    score: float
    document: str = ""
    chunk_start_char: int = 0
    chunk_end_char: int = 0


@dataclass
class ModelInfo:
    name: str
    task: str
    labels: List[str] = field(default_factory=list)
    version: str = ""
    max_length: int = 0
    dtype: str = ""
    device: str = ""


def _read(path_or_bytes):
    if path_or_bytes is None or isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()


def _truncation(value):
    if isinstance(value, int):
        return value
    key = value.lower() if isinstance(value, str) else value
    if key not in _TRUNCATION:
        raise ValueError("truncation must be one of none, longest_first, only_first, only_second; got %r" % value)
    return _TRUNCATION[key]


class DserveClient:
    """Client of one dserve server (or a gRPC target such as
    "ipv4:127.0.0.1:5001,127.0.0.1:5002" with lb_policy="round_robin").

    target: "host:port" or any gRPC target string.
    token: bearer token, sent as `authorization: Bearer TOKEN`.
    tls_ca: CA certificate (path or PEM bytes); turns TLS on. With TLS,
        tls_client_cert/tls_client_key (path or bytes) add a client
        certificate and tls_server_name overrides the name checked against
        the server certificate.
    lb_policy: "round_robin" or "pick_first"; None (default): round_robin
        through the default service config DEFAULT_SERVICE_CONFIG (for
        "dns:///dserve-headless:5001", a Kubernetes headless Service: calls
        spread over every pod, and the server's GOAWAY on drain or
        --max-connection-age-s makes the channel re-resolve and rebalance).
    timeout: deadline of each attempt, seconds.
    max_attempts: attempts in all for UNAVAILABLE / RESOURCE_EXHAUSTED.
    """

    def __init__(self, target, token=None, tls_ca=None, timeout=10.0, max_attempts=3, *,
                 tls_client_cert=None, tls_client_key=None, tls_server_name=None, lb_policy=None,
                 initial_backoff=0.1, max_backoff=2.0, max_message_bytes=64 << 20):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.target = target
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._token = token
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if lb_policy:
            options.append(("grpc.lb_policy_name", lb_policy))
        elif not any(name == "grpc.service_config" for name, _ in options):
            # No policy given: round_robin over every address the target
            # resolves to ("dns:///dserve-headless:5001" reaches every pod);
            # a service config from the resolver still overrides it.
            options.append(("grpc.service_config", DEFAULT_SERVICE_CONFIG))
        if tls_ca is not None or tls_client_cert is not None:
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            creds = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca),
                                                 private_key=_read(tls_client_key),
                                                 certificate_chain=_read(tls_client_cert))
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.InferenceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    # -- lifecycle ---------------------------------------------------------
    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- plumbing ----------------------------------------------------------
    def _call(self, method, request, timeout=None):
        request_id = uuid.uuid4().hex
        metadata = [("x-request-id", request_id)]
        if self._token:
            metadata.append(("authorization", "Bearer " + self._token))
        backoff = self.initial_backoff
        for attempt in range(1, self.max_attempts + 1):
            try:
                return method(request, metadata=metadata, timeout=timeout if timeout is not None else self.timeout)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
                details = e.details() if hasattr(e, "details") else str(e)
                if is_retryable(code, details) and attempt < self.max_attempts:
                    time.sleep(random.uniform(0.5, 1.0) * backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                rid = request_id
                trailers = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
                for key, value in trailers or ():
                    if key == "x-request-id":
                        rid = value
                raise DserveError(code, details or "", rid) from None
        raise AssertionError("unreachable")

    # -- RPCs ----------------------------------------------------------------
    def classify(self, model: str, texts: Union[str, Sequence[str]], top_k: int = 0, raw_scores: bool = False,
                 *, truncation=None, timeout=None) -> List[List[LabelScore]]:
        """One list of labels per text (request order), highest score first."""
        if isinstance(texts, str):
            texts = [texts]
        resp = self._call(self._stub.Classify, pb.ClassifyRequest(
            model=model, texts=list(texts), top_k=top_k, raw_scores=raw_scores,
            truncation=_truncation(truncation)), timeout)
        return [[LabelScore(l.label, l.score) for l in r.labels] for r in resp.results]

    def answer(self, model: str, question: str, contexts: Union[str, Sequence[str]], top_k: int = 1,
               null_score_diff_threshold: Optional[float] = None, max_answer_tokens: int = 0,
               max_answer_chars: int = 0, *, timeout=None) -> AnswerResult:
        """Extractive QA: best spans over the contexts, plus the no-answer verdict."""
        if isinstance(contexts, str):
            contexts = [contexts]
        req = pb.AnswerRequest(model=model, question=question, contexts=list(contexts), top_k=top_k,
                               max_answer_tokens=max_answer_tokens, max_answer_chars=max_answer_chars)
        if null_score_diff_threshold is not None:
            req.null_score_diff_threshold = null_score_diff_threshold
        resp = self._call(self._stub.Answer, req, timeout)
        return AnswerResult(
            answers=[Answer(a.text, a.context_index, a.start_char, a.end_char, a.score, a.logit_score)
                     for a in resp.answers],
            no_answer=resp.no_answer, no_answer_score=resp.no_answer_score,
            null_score_diff=resp.null_score_diff, model=resp.model, tokens=resp.usage.tokens)

    def rerank(self, model: str, query: str, documents: Sequence[str], top_n: int = 0,
               return_documents: bool = False, *, raw_scores: bool = False, truncation=None,
               timeout=None) -> List[RankedDocument]:
        """Documents by relevance to the query, highest score first."""
        resp = self._call(self._stub.Rerank, pb.RerankRequest(
            model=model, query=query, documents=list(documents), top_n=top_n, raw_scores=raw_scores,
            return_documents=return_documents, truncation=_truncation(truncation)), timeout)
        return [RankedDocument(r.index, r.score, r.document, r.chunk_start_char, r.chunk_end_char)
                for r in resp.results]

    def list_models(self, *, timeout=None) -> List[ModelInfo]:
        resp = self._call(self._stub.ListModels, pb.ListModelsRequest(), timeout)
        return [ModelInfo(m.name, m.task, list(m.labels), m.version, m.max_length, m.dtype, m.device)
                for m in resp.models]

    def health(self, service: str = "", *, timeout=None) -> str:
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING", "UNKNOWN" or
        "SERVICE_UNKNOWN". service "" is the whole server; "dserve.v1.Inference"
        or a model name ask about those."""
        resp = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
