#include "server/doors/grpc/service.h"

#include "server/doors/grpc/grpc_call.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <grpcpp/support/byte_buffer.h>

#include "server/request_validation.h"

namespace dserve {
namespace {

// Parses a raw request (server/request_validation.h).
template <typename Request>
absl::StatusOr<std::unique_ptr<Request>> ParseRawRequest(const grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return absl::InvalidArgumentError("request: unreadable message");
  std::string bytes;
  bytes.reserve(buffer->Length());
  for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return ParseRequest<Request>(absl::string_view(bytes));
}

// The reactor of a model call: serialises the response on the completion
// thread and sends the model version as initial metadata.
class ModelCallReactor final : public PathCallReactor {
 public:
  ModelCallReactor(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) : ctx_(ctx), response_(response) {}

  template <typename Response>
  void Complete(absl::Status status, std::unique_ptr<Response> response) {
    if (response != nullptr) {
      ctx_->AddInitialMetadata(kModelVersionKey, response->model_version());
      bool own = false;
      grpc::Status s = grpc::SerializationTraits<google::protobuf::Message>::Serialize(*response, response_, &own);
      if (!s.ok()) status = absl::InternalError(absl::StrCat("serialising the response: ", s.error_message()));
    }
    Completed(status);
  }

 private:
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* response_;
};

}  // namespace

template <typename Request, typename Response, typename Run>
grpc::ServerUnaryReactor* InferenceService::Handle(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response, const char* method, Run run) {
  CallInfo info = GrpcCallInfo(ctx, Protocol::kGrpc);
  PreprocessGate::Ticket ticket;
  if (absl::Status s = path_->Admit(info, method, &ticket); !s.ok()) return FinishNow(ctx, s);
  auto request = ParseRawRequest<Request>(raw);
  if (!request.ok()) {
    path_->Refuse(info, method, request.status());
    return FinishNow(ctx, request.status());
  }
  if ((*request)->has_priority()) info.priority = (*request)->priority();
  auto* reactor = new ModelCallReactor(ctx, response);
  reactor->Started(run(info, *std::move(request), std::move(ticket),
                       [reactor](const absl::Status& status, std::unique_ptr<Response> out) {
                         reactor->Complete(status, std::move(out));
                       }));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* response) {
  return Handle<v1::ClassifyRequest, v1::ClassifyResponse>(
      ctx, raw, response, "classify", [this](auto&&... args) { return path_->Classify(std::move(args)...); });
}

grpc::ServerUnaryReactor* InferenceService::Answer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  return Handle<v1::AnswerRequest, v1::AnswerResponse>(
      ctx, raw, response, "answer", [this](auto&&... args) { return path_->Answer(std::move(args)...); });
}

grpc::ServerUnaryReactor* InferenceService::Rerank(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  return Handle<v1::RerankRequest, v1::RerankResponse>(
      ctx, raw, response, "rerank", [this](auto&&... args) { return path_->Rerank(std::move(args)...); });
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* ctx,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  auto models = path_->ListModels(GrpcCallInfo(ctx, Protocol::kGrpc));
  if (!models.ok()) return FinishNow(ctx, models.status());
  *response = *std::move(models);
  return FinishNow(ctx, absl::OkStatus());
}

}  // namespace dserve
