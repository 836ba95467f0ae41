#include "server/doors/oip/oip_grpc_service.h"

#include "server/doors/grpc/grpc_call.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"

namespace dserve {
namespace oip {
namespace {

// ModelInfer's reactor: raw or typed outputs, as the request came.
class InferReactor final : public PathCallReactor {
 public:
  InferReactor(inference::ModelInferResponse* response, bool raw_outputs)
      : response_(response), raw_outputs_(raw_outputs) {}

  void Complete(const absl::Status& status, std::unique_ptr<inference::ModelInferResponse> out) {
    if (out != nullptr) {
      if (raw_outputs_) UseRawOutputs(out.get());
      *response_ = std::move(*out);
    }
    Completed(status);
  }

 private:
  inference::ModelInferResponse* response_;
  const bool raw_outputs_;
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
  return Reply(ctx, calls_.ServerMetadata(GrpcCallInfo(ctx, Protocol::kOip)), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ModelMetadataRequest* request,
                                                        inference::ModelMetadataResponse* response) {
  return Reply(ctx, calls_.ModelMetadata(GrpcCallInfo(ctx, Protocol::kOip), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelConfig(grpc::CallbackServerContext* ctx,
                                                      const inference::ModelConfigRequest* request,
                                                      inference::ModelConfigResponse* response) {
  return Reply(ctx, calls_.ModelConfig(GrpcCallInfo(ctx, Protocol::kOip), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelStatistics(grpc::CallbackServerContext* ctx,
                                                          const inference::ModelStatisticsRequest* request,
                                                          inference::ModelStatisticsResponse* response) {
  return Reply(ctx, calls_.ModelStatistics(GrpcCallInfo(ctx, Protocol::kOip), request->name(), request->version()), response);
}

grpc::ServerUnaryReactor* OipGrpcService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelInferRequest* request,
                                                     inference::ModelInferResponse* response) {
  CallInfo info = GrpcCallInfo(ctx, Protocol::kOip);
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
