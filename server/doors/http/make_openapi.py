"""Writes server/doors/http/openapi.json, the OpenAPI 3.1 document of the HTTP/JSON
API (served at GET /openapi.json, embedded at build time). The checked-in JSON
is the contract; this script is how it was written: edit here, run it
(/usr/bin/python3 server/doors/http/make_openapi.py) and commit both. The e2e tests
(tests/e2e/test_http.py) validate every route's real responses against it."""
import json
import os
def ref(n): return {"$ref": "#/components/schemas/" + n}
def arr(x): return {"type": "array", "items": x}
S, I, N, B = {"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "number"}, {"type": "boolean"}
def obj(props, required=None, extra=False):
    o = {"type": "object", "properties": props}
    if required: o["required"] = required
    if not extra: o["additionalProperties"] = False
    return o
common = {"timeout_ms": {"type": "number", "exclusiveMinimum": 0, "description": "Deadline of the call, ms (also the request-timeout header)."},
          "priority": {"type": "integer", "description": "Scheduling priority (higher first); default the model's."}}
trunc = {"type": "string", "enum": ["TRUNCATION_UNSPECIFIED", "TRUNCATION_NONE", "TRUNCATION_LONGEST_FIRST", "TRUNCATION_ONLY_FIRST", "TRUNCATION_ONLY_SECOND"]}
usage = obj({"tokens": {"type": "string", "description": "uint64 (proto3 JSON writes 64-bit integers as strings)"}, "items": I})
timing = obj({"total_us": S, "queue_us": S, "inference_us": S})
schemas = {
 "Error": obj({"error": S, "error_type": {"type": "string", "enum": ["validation", "unauthorized", "forbidden", "not_found", "method_not_allowed", "timeout", "payload_too_large", "overloaded", "cancelled", "unhealthy", "backend"]}}, ["error", "error_type"]),
 "LabelScore": obj({"label": S, "score": N}, ["label", "score"]),
 "TeiPredictRequest": obj(dict({"inputs": {"oneOf": [S, arr(S), arr({"type": "array", "items": S, "minItems": 1, "maxItems": 2})]}, "raw_scores": B, "truncate": B, "truncation_direction": {"type": "string", "enum": ["Right", "Left", "right", "left"], "description": "With truncate: the end tokens are dropped from (default Right)."}}, **common), ["inputs"], extra=True),
 "TeiPredictResponse": {"oneOf": [arr(ref("LabelScore")), arr(arr(ref("LabelScore")))]},
 "TeiRerankRequest": obj(dict({"query": S, "texts": arr(S), "raw_scores": B, "return_text": B, "truncate": B, "truncation_direction": {"type": "string", "enum": ["Right", "Left", "right", "left"], "description": "With truncate: the end tokens are dropped from (default Right)."}}, **common), ["query", "texts"], extra=True),
 "TeiRank": obj({"index": I, "score": N, "text": S}, ["index", "score"]),
 "TeiRerankResponse": arr(ref("TeiRank")),
 "TeiTokenizeRequest": obj(dict({"inputs": {"oneOf": [S, arr(S)]}, "add_special_tokens": B}, **common), ["inputs"], extra=True),
 "SimpleToken": obj({"id": I, "text": S, "special": B, "start": I, "stop": I}, ["id", "text", "special", "start", "stop"]),
 "TeiTokenizeResponse": arr(arr(ref("SimpleToken"))),
 "TeiInfo": obj({"model_id": S, "model_sha": S, "model_dtype": S, "task": {"type": "string", "enum": ["classify", "answer", "rerank"]},
                 "model_type": {"type": "object", "minProperties": 1, "maxProperties": 1,
                                "additionalProperties": obj({"id2label": {"type": "object", "additionalProperties": S}, "label2id": {"type": "object", "additionalProperties": I}}, ["id2label", "label2id"])},
                 "max_concurrent_requests": I, "max_input_length": I, "max_batch_tokens": I, "max_batch_requests": I, "max_client_batch_size": I, "version": S},
                ["model_id", "model_sha", "model_dtype", "model_type", "task", "max_input_length", "version"]),
 "Health": obj({"status": {"type": "string", "enum": ["serving", "draining", "loading"]}}, ["status"]),
 "CohereRerankRequest": obj(dict({"model": S, "query": S, "documents": arr({"oneOf": [S, obj({"text": S}, ["text"], extra=True)]}), "top_n": I, "return_documents": B, "max_chunks_per_doc": {"type": "integer", "minimum": 1, "description": "Chunks scored per long document, the first ones (default: all)."}}, **common), ["query", "documents"], extra=True),
 "CohereRerankResponse": obj({"id": S, "model": S,
                              "results": arr(obj({"index": I, "relevance_score": N, "document": obj({"text": S}, ["text"])}, ["index", "relevance_score"])),
                              "meta": {"type": "object"}, "usage": obj({"total_tokens": I}, ["total_tokens"])}, ["id", "results"]),
 "HfAnswerRequest": obj(dict({"model": S, "inputs": obj({"question": S, "context": S}, ["question", "context"]),
                              "parameters": obj({"top_k": I, "max_answer_len": I, "handle_impossible_answer": B, "doc_stride": I, "max_answer_chars": I, "null_score_diff_threshold": N}, extra=True)}, **common),
                        ["model", "inputs"], extra=True),
 "HfAnswer": obj({"answer": S, "score": N, "start": I, "end": I, "no_answer_score": N}, ["answer", "score", "start", "end", "no_answer_score"]),
 "HfAnswerResponse": {"oneOf": [ref("HfAnswer"), arr(ref("HfAnswer"))]},
 "ClassifyRequest": obj(dict({"model": S, "texts": arr(S), "top_k": I, "topK": I, "raw_scores": B, "rawScores": B, "truncation": trunc}, **common), ["model", "texts"]),
 "Classification": obj({"labels": arr(ref("LabelScore")), "tokens": I, "truncated": B}, ["labels", "tokens", "truncated"]),
 "ClassifyResponse": obj({"results": arr(ref("Classification")), "usage": usage, "timing": timing, "model": S, "model_version": S}, ["results", "model", "model_version"]),
 "AnswerRequest": obj(dict({"model": S, "question": S, "contexts": arr(S), "top_k": I, "null_score_diff_threshold": N, "max_answer_tokens": I, "max_answer_chars": I}, **common), ["model", "question", "contexts"]),
 "Answer": obj({"text": S, "context_index": I, "start_char": I, "end_char": I, "score": N, "logit_score": N}, ["text", "context_index", "start_char", "end_char", "score"]),
 "AnswerResponse": obj({"answers": arr(ref("Answer")), "no_answer": B, "no_answer_score": N, "usage": usage, "timing": timing, "model": S, "null_score_diff": N, "model_version": S}, ["answers", "no_answer", "no_answer_score", "model", "model_version"]),
 "RerankRequest": obj(dict({"model": S, "query": S, "documents": arr(S), "top_n": I, "raw_scores": B, "return_documents": B, "truncation": trunc}, **common), ["model", "query", "documents"]),
 "RankedDocument": obj({"index": I, "score": N, "document": S, "chunk_start_char": I, "chunk_end_char": I}, ["index", "score", "document"]),
 "RerankResponse": obj({"results": arr(ref("RankedDocument")), "usage": usage, "timing": timing, "model": S, "model_version": S}, ["results", "model", "model_version"]),
 "ModelInfo": obj({"name": S, "task": S, "labels": arr(S), "version": S, "max_length": I, "dtype": S, "device": S, "model_type": S, "architecture": S, "requested_dtype": S}, ["name", "task", "labels", "version"]),
 "ListModelsResponse": obj({"models": arr(ref("ModelInfo"))}, ["models"]),
}
# proto3 JSON accepts either name; let request schemas allow the camelCase ones too.
for name in ["AnswerRequest", "RerankRequest"]:
    props = schemas[name]["properties"]
    for k in list(props):
        if "_" in k and k not in common:
            parts = k.split("_"); props[parts[0] + "".join(p.title() for p in parts[1:])] = props[k]
errors = {str(c): {"description": d, "content": {"application/json": {"schema": ref("Error")}}} for c, d in [
    (400, "Body not JSON / not of the route's shape, or a model of another task"), (401, "Missing or wrong bearer token"),
    (404, "Unknown model"), (408, "Deadline passed"), (413, "Body larger than --max-message-bytes"),
    (422, "Invalid input: empty text, a limit exceeded (the message names it)"), (429, "Queue full or pre-processing cap reached (Retry-After)"),
    (499, "Cancelled"), (500, "Internal error"), (503, "Draining or starting (Retry-After)"), (504, "Deadline exceeded")]}
error_components = errors
errors = {c: {"$ref": "#/components/responses/E" + c} for c in error_components}
def op(summary, req, resp, tags, model_param=False, auth=True):
    o = {"summary": summary, "tags": tags, "responses": dict({"200": {"description": "OK", "content": {"application/json": {"schema": ref(resp)}}}}, **errors)}
    if req: o["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(req)}}}
    params = [{"name": "request-timeout", "in": "header", "required": False, "schema": S, "description": "Deadline: milliseconds, or a duration with unit (2s, 250ms)."},
              {"name": "x-request-id", "in": "header", "required": False, "schema": S}]
    if model_param: params.append({"name": "model", "in": "query", "required": False, "schema": S, "description": "Model name; default --http-default-model or the only model of the task."})
    o["parameters"] = params
    if not auth: o["security"] = []
    return o
def health_op():
    o = op("200 while serving, 503 while starting or draining", None, "Health", ["TEI"], auth=False)
    o["responses"] = {"200": o["responses"]["200"],
                      "503": {"description": "Starting or draining", "content": {"application/json": {"schema": ref("Health")}}}}
    o["parameters"] = []
    return o
paths = {
 "/predict": {"post": op("Classify (TEI)", "TeiPredictRequest", "TeiPredictResponse", ["TEI"], True)},
 "/rerank": {"post": op("Rerank (TEI)", "TeiRerankRequest", "TeiRerankResponse", ["TEI"], True)},
 "/tokenize": {"post": op("Tokenize (TEI)", "TeiTokenizeRequest", "TeiTokenizeResponse", ["TEI"], True)},
 "/info": {"get": op("Model info (TEI)", None, "TeiInfo", ["TEI"], True)},
 "/health": {"get": health_op()},
 "/v1/rerank": {"post": op("Rerank (Cohere / Jina)", "CohereRerankRequest", "CohereRerankResponse", ["Cohere"])},
 "/v1/answer": {"post": op("Extractive QA (Hugging Face question-answering shape)", "HfAnswerRequest", "HfAnswerResponse", ["Hugging Face"])},
 "/v1/classify": {"post": op("Classify (dserve.v1.ClassifyRequest in proto3 JSON)", "ClassifyRequest", "ClassifyResponse", ["dserve.v1"])},
 "/v1/models": {"get": op("Served models (dserve.v1.ListModelsResponse)", None, "ListModelsResponse", ["dserve.v1"])},
 "/dserve.v1.Inference/Classify": {"post": op("gRPC Classify in proto3 JSON", "ClassifyRequest", "ClassifyResponse", ["dserve.v1"])},
 "/dserve.v1.Inference/Answer": {"post": op("gRPC Answer in proto3 JSON", "AnswerRequest", "AnswerResponse", ["dserve.v1"])},
 "/dserve.v1.Inference/Rerank": {"post": op("gRPC Rerank in proto3 JSON", "RerankRequest", "RerankResponse", ["dserve.v1"])},
 "/dserve.v1.Inference/ListModels": {"post": op("gRPC ListModels in proto3 JSON", None, "ListModelsResponse", ["dserve.v1"])},
 "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3 document", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
 "/": {"get": {"summary": "Try-it page (HTML, no external assets)", "security": [], "responses": {"200": {"description": "HTML", "content": {"text/html": {"schema": S}}}}}},
 "/metrics": {"get": {"summary": "Prometheus metrics (when --metrics-listen equals --http-listen)", "security": [], "responses": {"200": {"description": "text exposition 0.0.4", "content": {"text/plain": {"schema": S}}}}}},
}
doc = {"openapi": "3.1.0",
       "info": {"title": "dserve HTTP/JSON API", "version": "1",
                "description": "The HTTP front door of dserve: the same models, limits, auth and metrics as gRPC (proto/dserve/v1/inference.proto). See docs/api.md."},
       "servers": [{"url": "/"}],
       "security": [{"bearer": []}],
       "paths": paths,
       "components": {"schemas": schemas, "responses": {"E" + c: v for c, v in error_components.items()}, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "Only when the server runs with --auth-token-file."}}}}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openapi.json")
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
