// TEI's gRPC API (tei.v1, proto/tei/tei.proto) on --listen beside
// dserve.v1.Inference: a front door over RequestPath (DESIGN §8), like the
// dserve.v1 service (server/doors/grpc/service.h). It maps TEI's messages onto the v1
// requests and back; auth, limits, deadlines, drain, queueing, decode and
// the metrics (protocol="tei-grpc") are the path's.
//
//   Info               the chosen model (RequestPath::FindModel)
//   Predict[Pair]      v1 Classify of one text / one pair (truncate: true =
//                      longest first, false = NONE; truncation_direction)
//   Rerank             v1 Rerank (texts = documents, return_text)
//   RerankStream       one v1 Rerank per distinct query of the stream, merged
//   Tokenize, Decode   the chosen model's tokenizer (RequestPath::Tokenize)
//   Embed*             FAILED_PRECONDITION: dserve serves no embedding model
//   *Stream (bidi)     one response per request, in order, up to
//                      kStreamWindow requests in flight; the first error
//                      ends the stream with its status
//
// Model choice: the `x-dserve-model` metadata, else --http-default-model
// when it serves the call's task, else the only model of that task
// (ChooseModel, server/doors/http/http_json.h).
//
// Reactions never block: a call is admitted, tokenized and queued on the
// gRPC thread and finishes on a completion thread.
//
// Thread safety: all methods may run concurrently. `path` must outlive the
// services (serve_command shuts the gRPC server down first).
#pragma once

#include <memory>
#include <vector>

#include <grpcpp/server_builder.h>

#include "server/request_path.h"

namespace dserve {

// The metadata key naming the model of a tei.v1 call.
inline constexpr char kTeiModelMetadata[] = "x-dserve-model";

class TeiServices {
 public:
  explicit TeiServices(RequestPath* path);
  ~TeiServices();
  TeiServices(const TeiServices&) = delete;
  TeiServices& operator=(const TeiServices&) = delete;

  // Registers tei.v1.Info, Embed, Predict, Rerank and Tokenize on `builder`
  // (the services must outlive the server built from it).
  void Register(grpc::ServerBuilder* builder);
  // Their full names ("tei.v1.Predict", ...), for the health service.
  static std::vector<const char*> ServiceNames();

  // The implementation (tei_service.cc).
  struct Impl;
  struct Services;

 private:
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Services> services_;  // over *impl_; destroyed first
};

}  // namespace dserve
