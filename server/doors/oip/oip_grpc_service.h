// The Open Inference Protocol's gRPC door: inference.GRPCInferenceService
// (proto/inference/grpc_service.proto) on --listen beside dserve.v1.Inference,
// an adapter over OipCalls (oip_calls.h) and so over RequestPath: it reads
// the call's metadata (authorization, x-request-id, deadline), hands the
// request to OipCalls and writes the reply or the status. ModelInfer's
// reply carries raw_output_contents when the request sent
// raw_input_contents (Triton's clients), else typed contents.
//
// Reactions never block (callback API): ModelInfer finishes on a
// completion thread. Thread safety: all methods may run concurrently.
#pragma once

#include "inference/grpc_service.grpc.pb.h"
#include "server/doors/oip/oip_calls.h"

namespace dserve {
namespace oip {

class OipGrpcService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // Not owned: `path` must outlive the service.
  explicit OipGrpcService(RequestPath* path) : calls_(path) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx, const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;

 private:
  OipCalls calls_;
};

}  // namespace oip
}  // namespace dserve
