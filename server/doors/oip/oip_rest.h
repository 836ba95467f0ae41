// The Open Inference Protocol's REST door on --http-listen (docs/api.md,
// "Open Inference Protocol"), an adapter over OipCalls (oip_calls.h):
//
//   GET  /v2/health/live, /v2/health/ready, /v2 (server metadata)
//   GET  /v2/models/{m}[/versions/{v}]            model metadata
//   GET  /v2/models/{m}[/versions/{v}]/ready      200 ready, 400 not
//   GET  /v2/models/{m}[/versions/{v}]/config     Triton's model configuration
//   GET  /v2/models/{m}[/versions/{v}]/stats      Triton's statistics
//   GET  /v2/models/stats                         every model's statistics
//   POST /v2/models/{m}[/versions/{v}]/infer      inference
//
// Infer bodies are JSON (tensor `data` row-major, flat or nested) or use the
// binary tensor data extension: the JSON header's length in
// Inference-Header-Content-Length, then each binary input's bytes in input
// order (`parameters.binary_data_size`; BYTES elements as a 4-byte
// little-endian length and the bytes). Outputs are JSON `data` unless the
// request asks binary (`parameters.binary_data_output`, or an output's
// `parameters.binary_data`): then the reply is the JSON header (its length in
// Inference-Header-Content-Length) followed by those outputs' bytes, each
// output with `parameters.binary_data_size`.
//
// Errors: {"error": message} with 400 (invalid request or tensor), 404
// (unknown model, version or route), 401, 429, 503 (draining), 504.
// Health routes need no token. Every reply carries x-request-id (except the
// health routes).
#pragma once

namespace dserve {

class HttpServer;
class RequestPath;

namespace oip {

// While the models load: /v2/health/live says 200, /v2/health/ready and
// every model's /ready 400 (RegisterOipRoutes replaces them).
void RegisterOipLoadingRoutes(HttpServer* server);
// The routes above. `path` must outlive every request the server serves.
void RegisterOipRoutes(HttpServer* server, RequestPath* path);

}  // namespace oip
}  // namespace dserve
