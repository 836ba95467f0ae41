// C++ client of the dserve gRPC API (proto/dserve/v1/inference.proto).
//
// One Client owns one gRPC channel (one HTTP/2 connection per backend
// address). Calls carry the bearer token, the deadline (timeout_ms from the
// call's start, spanning every retry) and are retried with exponential
// backoff and jitter on UNAVAILABLE and RESOURCE_EXHAUSTED only
// (client/retry_policy.h).
//
// Thread safety: a Client is thread-safe; share one per process/target. The
// async methods return at once; their callback runs exactly once, on a gRPC
// thread, and must not block. The Client must outlive its pending async calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/retry_policy.h"
#include "dserve/v1/inference.grpc.pb.h"
#include "dserve/v1/inference.pb.h"
#include "inference/grpc_service.grpc.pb.h"

namespace dserve {

struct ClientOptions {
  // gRPC target: "host:port", or a resolver URI such as
  // "ipv4:127.0.0.1:5001,127.0.0.1:5002" or "dns:///dserve-headless:5001".
  std::string target = "localhost:5001";
  // Load-balancing policy: "round_robin" (spread calls over every address
  // the target resolves to) or "pick_first". "" (default): round_robin
  // through a default service config ({"loadBalancingConfig":
  // [{"round_robin":{}}]}), which a service config from the resolver
  // overrides; so "dns:///dserve-headless:5001" (a Kubernetes headless
  // Service) spreads calls over every pod, and the server's GOAWAY (drain,
  // --max-connection-age-s) makes the channel re-resolve and rebalance.
  std::string lb_policy;
  // PEM file with the CA that signed the server's certificate; empty =
  // plaintext.
  std::string tls_ca_file;
  // Bearer token sent as `authorization: Bearer TOKEN`; empty = none.
  std::string token;
  // Overall deadline of one call, retries and backoff included, in
  // milliseconds; 0 = none. Default 30000.
  int64_t timeout_ms = 30000;
  // Retries on UNAVAILABLE / RESOURCE_EXHAUSTED (max_attempts 1 = none).
  RetryPolicy retry;
  // Clients with different ids never share a connection (the load generator
  // opens several); equal ids may. Default 0.
  int channel_id = 0;
  // Largest response accepted, bytes. Default 64 MiB.
  int max_receive_message_bytes = 64 << 20;
};

// "OK", "CANCELLED", ..., "UNAUTHENTICATED" (the gRPC code names).
std::string_view StatusCodeName(grpc::StatusCode code);

// grpc::Status -> absl::Status with the same code and message.
absl::Status ToAbslStatus(const grpc::Status& status);

class Client {
 public:
  template <typename Response>
  using Callback = std::function<void(const grpc::Status&, const Response&)>;

  // Validates the options, reads the CA file and creates the channel (it
  // connects lazily, on the first call or WaitForConnected).
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Blocking calls (retried as documented above).
  absl::StatusOr<v1::ClassifyResponse> Classify(const v1::ClassifyRequest& request) const;
  absl::StatusOr<v1::AnswerResponse> Answer(const v1::AnswerRequest& request) const;
  absl::StatusOr<v1::RerankResponse> Rerank(const v1::RerankRequest& request) const;
  absl::StatusOr<v1::ListModelsResponse> ListModels() const;
  // grpc.health.v1 Check of `service` ("" = the whole server). Returns the
  // serving status name: "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or
  // "UNKNOWN". Not retried (a probe reports what it sees). When `peer` is
  // given it receives the address of the backend that answered (gRPC's
  // peer string, e.g. "ipv4:127.0.0.1:5001").
  absl::StatusOr<std::string> Health(const std::string& service,
                                     std::string* peer = nullptr) const;

  // Non-blocking calls on the gRPC callback API, retried like the blocking
  // ones (backoff waits on a grpc::Alarm, no thread sleeps).
  void ClassifyAsync(v1::ClassifyRequest request, Callback<v1::ClassifyResponse> done) const;
  void AnswerAsync(v1::AnswerRequest request, Callback<v1::AnswerResponse> done) const;
  void RerankAsync(v1::RerankRequest request, Callback<v1::RerankResponse> done) const;
  // The Open Inference Protocol's ModelInfer on the same channel
  // (inference.GRPCInferenceService; `dserve-client load --protocol oip`).
  void ModelInferAsync(inference::ModelInferRequest request, Callback<inference::ModelInferResponse> done) const;

  // Connects now; true when the channel is READY before `timeout`.
  bool WaitForConnected(absl::Duration timeout) const;

  const ClientOptions& options() const { return options_; }

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  // The call's overall deadline from now.
  absl::Time Deadline() const;
  // Sets deadline and metadata of one attempt.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;
  template <typename Response, typename Invoke>
  absl::StatusOr<Response> CallWithRetries(Invoke invoke) const;
  template <typename Request, typename Response, typename Invoke>
  void CallAsync(Request request, Invoke invoke, Callback<Response> done) const;

  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Inference::Stub> stub_;
  const std::unique_ptr<inference::GRPCInferenceService::Stub> oip_stub_;
};

// Reads a token file: its first line, surrounding whitespace removed; an
// empty token is an error.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace dserve
