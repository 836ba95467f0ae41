#include "server/doors/grpc/service.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <grpcpp/support/byte_buffer.h>

#include "server/request_validation.h"

namespace dserve {
namespace {

constexpr char kRequestIdKey[] = "x-request-id";
// The version of the model that computed a response (ServedModel::version).
constexpr char kModelVersionKey[] = "x-dserve-model-version";

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

std::string Metadata(grpc::CallbackServerContext* ctx, const char* key) {
  auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// What the path needs of a gRPC call; the request id goes back as a trailer.
CallInfo Info(grpc::CallbackServerContext* ctx) {
  CallInfo info;
  info.protocol = Protocol::kGrpc;
  info.received = absl::Now();
  info.request_id = RequestIdFor(Metadata(ctx, kRequestIdKey));
  info.authorization = Metadata(ctx, "authorization");
  const auto deadline = ctx->deadline();
  info.deadline = deadline == std::chrono::system_clock::time_point::max() ? absl::InfiniteFuture()
                                                                           : absl::FromChrono(deadline);
  ctx->AddTrailingMetadata(kRequestIdKey, info.request_id);
  return info;
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

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

// The reactor of a model call. Finish runs once both the path has returned
// the call's handle and the completion has run (whichever is last), so a
// cancel never touches a deleted reactor; gRPC deletes it (OnDone) after.
class ModelCallReactor final : public grpc::ServerUnaryReactor {
 public:
  ModelCallReactor(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) : ctx_(ctx), response_(response) {}

  // The path's completion: serialises the response on the completion thread.
  template <typename Response>
  void Complete(const absl::Status& status, std::unique_ptr<Response> response) {
    status_ = status;
    if (response != nullptr) {
      ctx_->AddInitialMetadata(kModelVersionKey, response->model_version());
      bool own = false;
      grpc::Status s = grpc::SerializationTraits<google::protobuf::Message>::Serialize(*response, response_, &own);
      if (!s.ok()) status_ = absl::InternalError(absl::StrCat("serialising the response: ", s.error_message()));
    }
    Arrive();
  }

  // After the path returned (`handle` null when the call never queued).
  void Started(std::shared_ptr<CallHandle> handle) {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handle_ = handle;
      cancel = cancelled_;
    }
    if (cancel && handle != nullptr) handle->Cancel();
    Arrive();
  }

  void OnCancel() override {
    std::shared_ptr<CallHandle> handle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      handle = handle_;
    }
    if (handle != nullptr) handle->Cancel();
  }
  void OnDone() override { delete this; }

 private:
  void Arrive() {
    if (pending_.fetch_sub(1) == 1) Finish(ToGrpc(status_));  // `this` may be deleted from here on
  }

  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* response_;
  absl::Status status_;
  std::atomic<int> pending_{2};  // Started + Complete
  std::mutex mu_;
  std::shared_ptr<CallHandle> handle_;
  bool cancelled_ = false;
};

}  // namespace

template <typename Request, typename Response, typename Run>
grpc::ServerUnaryReactor* InferenceService::Handle(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response, const char* method, Run run) {
  CallInfo info = Info(ctx);
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
  auto models = path_->ListModels(Info(ctx));
  if (!models.ok()) return FinishNow(ctx, models.status());
  *response = *std::move(models);
  return FinishNow(ctx, absl::OkStatus());
}

}  // namespace dserve
