#include "server/doors/oip/oip_grpc_service.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/time/clock.h"

namespace dserve {
namespace oip {
namespace {

constexpr char kRequestIdKey[] = "x-request-id";

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

std::string Metadata(grpc::CallbackServerContext* ctx, const char* key) {
  auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? std::string() : std::string(it->second.data(), it->second.size());
}

CallInfo Info(grpc::CallbackServerContext* ctx) {
  CallInfo info;
  info.protocol = Protocol::kOip;
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

template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, absl::StatusOr<Response> result,
                                Response* response) {
  if (!result.ok()) return FinishNow(ctx, result.status());
  *response = *std::move(result);
  return FinishNow(ctx, absl::OkStatus());
}

// ModelInfer's reactor. Finish runs once both the call's handle is known and
// the completion has run, so a cancel never touches a deleted reactor.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(inference::ModelInferResponse* response, bool raw_outputs)
      : response_(response), raw_outputs_(raw_outputs) {}

  void Complete(const absl::Status& status, std::unique_ptr<inference::ModelInferResponse> out) {
    status_ = status;
    if (out != nullptr) {
      if (raw_outputs_) UseRawOutputs(out.get());
      *response_ = std::move(*out);
    }
    Arrive();
  }

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
    if (pending_.fetch_sub(1) == 1) Finish(ToGrpc(status_));
  }

  inference::ModelInferResponse* response_;
  const bool raw_outputs_;
  absl::Status status_;
  std::atomic<int> pending_{2};
  std::mutex mu_;
  std::shared_ptr<CallHandle> handle_;
  bool cancelled_ = false;
};

}  // namespace

grpc::ServerUnaryReactor* OipGrpcService::ServerLive(grpc::CallbackServerContext* ctx,
                                                     const inference::ServerLiveRequest*,
                                                     inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* OipGrpcService::ServerReady(grpc::CallbackServerContext* ctx,
                                                      const inference::ServerReadyRequest*,
                                                      inference::ServerReadyResponse* response) {
  response->set_ready(calls_.ServerReady());
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* OipGrpcService::ModelReady(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelReadyRequest* request,
                                                     inference::ModelReadyResponse* response) {
  response->set_ready(calls_.ModelReady(request->name(), request->version()));
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* OipGrpcService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                         const inference::ServerMetadataRequest*,
                                                         inference::ServerMetadataResponse* response) {
  return Reply(ctx, calls_.ServerMetadata(Info(ctx)), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ModelMetadataRequest* request,
                                                        inference::ModelMetadataResponse* response) {
  return Reply(ctx, calls_.ModelMetadata(Info(ctx), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelConfig(grpc::CallbackServerContext* ctx,
                                                      const inference::ModelConfigRequest* request,
                                                      inference::ModelConfigResponse* response) {
  return Reply(ctx, calls_.ModelConfig(Info(ctx), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelStatistics(grpc::CallbackServerContext* ctx,
                                                          const inference::ModelStatisticsRequest* request,
                                                          inference::ModelStatisticsResponse* response) {
  return Reply(ctx, calls_.ModelStatistics(Info(ctx), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelInferRequest* request,
                                                     inference::ModelInferResponse* response) {
  CallInfo info = Info(ctx);
  PreprocessGate::Ticket ticket;
  if (absl::Status s = calls_.path()->Admit(info, "model_infer", &ticket); !s.ok()) return FinishNow(ctx, s);
  auto input = FromGrpcRequest(*request);
  if (!input.ok()) {
    calls_.path()->Refuse(info, "model_infer", input.status());
    return FinishNow(ctx, input.status());
  }
  auto* reactor = new InferReactor(response, request->raw_input_contents_size() > 0);
  reactor->Started(calls_.Infer(std::move(info), *input, std::move(ticket),
                                [reactor](const absl::Status& status,
                                          std::unique_ptr<inference::ModelInferResponse> out) {
                                  reactor->Complete(status, std::move(out));
                                }));
  return reactor;
}

}  // namespace oip
}  // namespace dserve
