// InferenceService: the gRPC front door of dserve.v1.Inference (callback
// API), an adapter over RequestPath (server/request_path.h, DESIGN §8): it
// reads the call's metadata (authorization, x-request-id, deadline) and raw
// request bytes, hands them to the path, and writes the response or the
// status back. Nothing about limits, auth, queues or decode is decided here.
//
// Reactions never block: a handler runs the path's cheap checks, parses,
// tokenizes (at most --max-concurrent-preprocess requests at once) and
// enqueues, then returns; the call finishes on a completion thread.
//
// Thread safety: all methods may run concurrently.
#pragma once

#include "dserve/v1/inference.grpc.pb.h"
#include "server/request_path.h"

namespace dserve {

// Classify, Answer and Rerank are raw methods (ByteBuffer in and out): the
// service parses the request itself so that invalid UTF-8 in a text is an
// INVALID_ARGUMENT naming the field and byte, not gRPC's bare parse error.
using InferenceServiceBase = v1::Inference::WithRawCallbackMethod_Classify<
    v1::Inference::WithRawCallbackMethod_Answer<
        v1::Inference::WithRawCallbackMethod_Rerank<v1::Inference::CallbackService>>>;

class InferenceService final : public InferenceServiceBase {
 public:
  // Not owned: `path` must outlive the service.
  explicit InferenceService(RequestPath* path) : path_(path) {}

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context, const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

 private:
  template <typename Request, typename Response, typename Run>
  grpc::ServerUnaryReactor* Handle(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                   grpc::ByteBuffer* response, const char* method, Run run);

  RequestPath* const path_;
};

}  // namespace dserve
