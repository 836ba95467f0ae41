// The HTTP/JSON front door (DESIGN §8): the routes of docs/api.md ("HTTP/JSON
// API") on an HttpServer, each a thin adapter over RequestPath. A route reads
// its CallInfo (x-request-id, authorization, request-timeout), calls
// RequestPath::Admit, parses its body into a v1 request (http_json.h), calls
// the path, waits for the completion and writes the v1 response in its JSON
// shape. Auth, draining, deadlines, limits, queueing and metrics are the
// path's; this file only maps formats and status codes.
//
// Routes: POST /predict /rerank /tokenize, GET /info /health (TEI);
// POST /v1/rerank (Cohere, Jina); POST /v1/answer (Hugging Face QA);
// POST /v1/classify, GET /v1/models and POST /dserve.v1.Inference/{Classify,
// Answer,Rerank,ListModels} (proto3 JSON of the gRPC messages);
// GET /openapi.json and GET / (try-it page) from files embedded at build time.
//
// Every API response carries x-request-id (not /health, /openapi.json, / and
// errors the library sends itself, such as 413); results carry
// x-dserve-model-version.
// Errors: {"error", "error_type"} with the status of HttpStatusFor (plus
// Retry-After on 429 and 503, WWW-Authenticate on 401). /health, /openapi.json
// and / need no token.
//
// A handler thread waits while its request is computed; the deadline (or
// drain) bounds that wait. A client that disconnects is not noticed until
// its result is ready (the library reports no disconnect mid-request).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/protocol.h"

namespace dserve {

class HttpServer;
class RequestPath;
struct CallInfo;
class HttpRequest;
struct HttpResponse;

// What the path needs of an HTTP call (both HTTP doors: this one and the
// OIP REST door): protocol, arrival time, request id (echoed as the
// x-request-id response header), authorization, and the deadline from a
// `request-timeout` header. A malformed request-timeout is returned as an
// error with `call` filled otherwise, so the door can refuse it.
absl::Status ReadHttpCall(const HttpRequest& req, Protocol protocol, CallInfo* call, HttpResponse* res);

// Registers the routes above on `server`. `path` must outlive every request
// the server serves (stop the server first).
void RegisterHttpRoutes(HttpServer* server, RequestPath* path);

// The embedded files (server/doors/http/openapi.json, server/doors/http/index.html).
absl::string_view OpenApiJson();
absl::string_view TryItPageHtml();

}  // namespace dserve
