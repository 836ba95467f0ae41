#include "client/dserve_client.h"

#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include <grpcpp/alarm.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dserve {
namespace {

// The channel's default service config when no lb_policy is given
// (ClientOptions::lb_policy).
constexpr char kDefaultServiceConfig[] = R"({"loadBalancingConfig":[{"round_robin":{}}]})";

constexpr std::string_view kCodeNames[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

// Uniform in [0, 1), one generator per thread (async callbacks run on many).
double JitterUnit() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientOptions& o) {
  if (o.tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  auto ca = ReadWholeFile("TLS CA file", o.tls_ca_file);
  if (!ca.ok()) return ca.status();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = *std::move(ca);
  return grpc::SslCredentials(ssl);
}

// One asynchronous call and its retries. Owns itself: deleted after `done`.
template <typename Request, typename Response>
class AsyncCall {
 public:
  using Invoke = std::function<void(grpc::ClientContext*, const Request*, Response*,
                                    std::function<void(grpc::Status)>)>;
  using Prepare = std::function<void(grpc::ClientContext*, absl::Time)>;

  AsyncCall(Request request, const RetryPolicy& policy, absl::Time deadline, Prepare prepare,
            Invoke invoke, Client::Callback<Response> done)
      : request_(std::move(request)),
        policy_(policy),
        deadline_(deadline),
        prepare_(std::move(prepare)),
        invoke_(std::move(invoke)),
        done_(std::move(done)) {}

  void Attempt() {
    ++attempts_;
    context_ = std::make_unique<grpc::ClientContext>();
    prepare_(context_.get(), deadline_);
    response_.Clear();
    invoke_(context_.get(), &request_, &response_,
            [this](grpc::Status status) { OnAttemptDone(std::move(status)); });
  }

 private:
  void OnAttemptDone(grpc::Status status) {
    if (!status.ok()) {
      auto delay = NextRetryDelay(policy_, attempts_, status, absl::Now(), deadline_,
                                  JitterUnit());
      if (delay.has_value()) {
        // A fresh alarm per wait: the previous one has fired already.
        alarm_ = std::make_unique<grpc::Alarm>();
        alarm_->Set(absl::ToChronoTime(absl::Now() + *delay), [this](bool) { Attempt(); });
        return;
      }
    }
    // This call's gRPC state goes before `done` runs: `done` may let the
    // owner destroy the Client (dserve-client load does, once the last call
    // is done), and the ClientContext holds a reference to the channel. Were
    // it released after `done`, the channel's last reference could drop here,
    // on a gRPC callback thread, and ~Channel shuts down and frees the
    // completion queue that very thread goes back to (seen under TSan as a
    // SEGV in grpc_completion_queue_next at the end of a load run).
    Client::Callback<Response> done = std::move(done_);
    Response response = std::move(response_);
    delete this;
    done(status, response);
  }

  Request request_;
  Response response_;
  const RetryPolicy policy_;
  const absl::Time deadline_;
  Prepare prepare_;
  Invoke invoke_;
  Client::Callback<Response> done_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::Alarm> alarm_;
  int attempts_ = 0;
};

}  // namespace

std::string_view StatusCodeName(grpc::StatusCode code) {
  const int i = static_cast<int>(code);
  if (i < 0 || i >= static_cast<int>(std::size(kCodeNames))) return "UNKNOWN";
  return kCodeNames[i];
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadWholeFile("token file", path);
  if (!text.ok()) return text.status();
  std::string first_line = text->substr(0, text->find('\n'));
  std::string token(absl::StripAsciiWhitespace(first_line));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("target is empty");
  if (!options.lb_policy.empty() && options.lb_policy != "round_robin" &&
      options.lb_policy != "pick_first") {
    return absl::InvalidArgumentError(
        absl::StrCat("lb policy '", options.lb_policy, "': expected round_robin or pick_first"));
  }
  if (options.timeout_ms < 0) return absl::InvalidArgumentError("timeout_ms must be >= 0");
  if (options.retry.max_attempts < 1) return absl::InvalidArgumentError("max_attempts must be >= 1");
  auto credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  if (!options.lb_policy.empty()) {
    args.SetLoadBalancingPolicyName(options.lb_policy);
  } else {
    // Only when the user chose none: a service config's policy would
    // override SetLoadBalancingPolicyName.
    args.SetServiceConfigJSON(kDefaultServiceConfig);
  }
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetMaxSendMessageSize(-1);
  // A private subchannel pool and a distinct argument keep channels with
  // different ids on different connections.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("dserve.channel_id", options.channel_id);
  auto channel = grpc::CreateCustomChannel(options.target, *credentials, args);
  if (channel == nullptr) return absl::InternalError("cannot create channel to " + options.target);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Inference::NewStub(channel_)),
      oip_stub_(inference::GRPCInferenceService::NewStub(channel_)) {}

absl::Time Client::Deadline() const {
  if (options_.timeout_ms == 0) return absl::InfiniteFuture();
  return absl::Now() + absl::Milliseconds(options_.timeout_ms);
}

void Client::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
}

template <typename Response, typename Invoke>
absl::StatusOr<Response> Client::CallWithRetries(Invoke invoke) const {
  const absl::Time deadline = Deadline();
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    Prepare(&context, deadline);
    Response response;
    grpc::Status status = invoke(&context, &response);
    if (status.ok()) return response;
    auto delay = NextRetryDelay(options_.retry, attempt, status, absl::Now(),
                                deadline, JitterUnit());
    if (!delay.has_value()) return ToAbslStatus(status);
    absl::SleepFor(*delay);
  }
}

absl::StatusOr<v1::ClassifyResponse> Client::Classify(const v1::ClassifyRequest& request) const {
  return CallWithRetries<v1::ClassifyResponse>(
      [&](grpc::ClientContext* c, v1::ClassifyResponse* r) { return stub_->Classify(c, request, r); });
}

absl::StatusOr<v1::AnswerResponse> Client::Answer(const v1::AnswerRequest& request) const {
  return CallWithRetries<v1::AnswerResponse>(
      [&](grpc::ClientContext* c, v1::AnswerResponse* r) { return stub_->Answer(c, request, r); });
}

absl::StatusOr<v1::RerankResponse> Client::Rerank(const v1::RerankRequest& request) const {
  return CallWithRetries<v1::RerankResponse>(
      [&](grpc::ClientContext* c, v1::RerankResponse* r) { return stub_->Rerank(c, request, r); });
}

absl::StatusOr<v1::ListModelsResponse> Client::ListModels() const {
  const v1::ListModelsRequest request;
  return CallWithRetries<v1::ListModelsResponse>(
      [&](grpc::ClientContext* c, v1::ListModelsResponse* r) {
        return stub_->ListModels(c, request, r);
      });
}

absl::StatusOr<std::string> Client::Health(const std::string& service, std::string* peer) const {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  Prepare(&context, Deadline());
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (peer != nullptr) *peer = context.peer();
  if (!status.ok()) return ToAbslStatus(status);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

template <typename Request, typename Response, typename Invoke>
void Client::CallAsync(Request request, Invoke invoke, Callback<Response> done) const {
  auto* call = new AsyncCall<Request, Response>(
      std::move(request), options_.retry, Deadline(),
      [this](grpc::ClientContext* c, absl::Time deadline) { Prepare(c, deadline); },
      std::move(invoke), std::move(done));
  call->Attempt();
}

void Client::ClassifyAsync(v1::ClassifyRequest request, Callback<v1::ClassifyResponse> done) const {
  CallAsync<v1::ClassifyRequest, v1::ClassifyResponse>(
      std::move(request),
      [this](grpc::ClientContext* c, const v1::ClassifyRequest* q, v1::ClassifyResponse* r,
             std::function<void(grpc::Status)> f) { stub_->async()->Classify(c, q, r, std::move(f)); },
      std::move(done));
}

void Client::AnswerAsync(v1::AnswerRequest request, Callback<v1::AnswerResponse> done) const {
  CallAsync<v1::AnswerRequest, v1::AnswerResponse>(
      std::move(request),
      [this](grpc::ClientContext* c, const v1::AnswerRequest* q, v1::AnswerResponse* r,
             std::function<void(grpc::Status)> f) { stub_->async()->Answer(c, q, r, std::move(f)); },
      std::move(done));
}

void Client::RerankAsync(v1::RerankRequest request, Callback<v1::RerankResponse> done) const {
  CallAsync<v1::RerankRequest, v1::RerankResponse>(
      std::move(request),
      [this](grpc::ClientContext* c, const v1::RerankRequest* q, v1::RerankResponse* r,
             std::function<void(grpc::Status)> f) { stub_->async()->Rerank(c, q, r, std::move(f)); },
      std::move(done));
}

void Client::ModelInferAsync(inference::ModelInferRequest request,
                             Callback<inference::ModelInferResponse> done) const {
  CallAsync<inference::ModelInferRequest, inference::ModelInferResponse>(
      std::move(request),
      [this](grpc::ClientContext* c, const inference::ModelInferRequest* q, inference::ModelInferResponse* r,
             std::function<void(grpc::Status)> f) { oip_stub_->async()->ModelInfer(c, q, r, std::move(f)); },
      std::move(done));
}

bool Client::WaitForConnected(absl::Duration timeout) const {
  return channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace dserve
