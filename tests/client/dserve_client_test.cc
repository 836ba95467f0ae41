// The client library against in-process fake servers: retries (sync and
// async), deadlines, token metadata, round-robin, TLS and health.
#include "client/dserve_client.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "tests/client/test_process.h"

namespace dserve {
namespace {

class FakeInference final : public v1::Inference::Service {
 public:
  explicit FakeInference(std::string name) : name_(std::move(name)) {}

  grpc::Status Classify(grpc::ServerContext* context, const v1::ClassifyRequest*,
                        v1::ClassifyResponse* response) override {
    const int n = ++calls;
    {
      absl::MutexLock lock(&mu_);
      auto it = context->client_metadata().find("authorization");
      authorization_ = it == context->client_metadata().end()
                           ? "<none>"
                           : std::string(it->second.data(), it->second.size());
    }
    if (n <= fail_first) return grpc::Status(fail_code, fail_message);
    response->set_model(name_);
    return grpc::Status::OK;
  }

  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

  std::atomic<int> calls{0};
  int fail_first = 0;
  grpc::StatusCode fail_code = grpc::StatusCode::UNAVAILABLE;
  std::string fail_message = "fake failure";

 private:
  const std::string name_;
  absl::Mutex mu_;
  std::string authorization_;
};

struct FakeServer {
  explicit FakeServer(const std::string& name,
                      std::shared_ptr<grpc::ServerCredentials> credentials =
                          grpc::InsecureServerCredentials())
      : service(name) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeServer() { server->Shutdown(); }

  std::string target() const { return "127.0.0.1:" + std::to_string(port); }

  FakeInference service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

ClientOptions FastRetries(const std::string& target) {
  ClientOptions o;
  o.target = target;
  o.timeout_ms = 5000;
  o.retry.max_attempts = 3;
  o.retry.initial_backoff = absl::Milliseconds(1);
  o.retry.jitter = 0;
  return o;
}

std::unique_ptr<Client> MakeClient(const ClientOptions& o) {
  auto client = Client::Create(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

v1::ClassifyRequest Request() {
  v1::ClassifyRequest r;
  r.set_model("m");
  r.add_texts("hello");
  return r;
}

TEST(ClientLibTest, SyncRetriesUnavailableThenSucceeds) {
  FakeServer server("a");
  server.service.fail_first = 2;
  auto client = MakeClient(FastRetries(server.target()));
  auto response = client->Classify(Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model(), "a");
  EXPECT_EQ(server.service.calls.load(), 3);
}

TEST(ClientLibTest, SyncRetriesResourceExhaustedAndGivesUpAfterMaxAttempts) {
  FakeServer server("a");
  server.service.fail_first = 100;
  server.service.fail_code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  auto client = MakeClient(FastRetries(server.target()));
  auto response = client->Classify(Request());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(response.status().message(), "fake failure");
  EXPECT_EQ(server.service.calls.load(), 3);
}

// Issue 16: a message over gRPC's size limit fails the same way on every
// attempt and every replica, although its code is RESOURCE_EXHAUSTED.
TEST(ClientLibTest, MessageTooLargeIsNotRetried) {
  for (const char* message : {"Received message larger than max (5000000 vs. 4194304)",
                              "Sent message larger than max (5000000 vs. 4194304)"}) {
    FakeServer server("a");
    server.service.fail_first = 100;
    server.service.fail_code = grpc::StatusCode::RESOURCE_EXHAUSTED;
    server.service.fail_message = message;
    auto client = MakeClient(FastRetries(server.target()));
    auto response = client->Classify(Request());
    EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(server.service.calls.load(), 1) << message;

    absl::Notification done;
    client->ClassifyAsync(Request(), [&](const grpc::Status&, const v1::ClassifyResponse&) { done.Notify(); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(server.service.calls.load(), 2) << "async: " << message;
  }
}

TEST(ClientLibTest, OtherCodesAreNotRetried) {
  for (auto code : {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::INTERNAL,
                    grpc::StatusCode::NOT_FOUND, grpc::StatusCode::UNAUTHENTICATED}) {
    FakeServer server("a");
    server.service.fail_first = 100;
    server.service.fail_code = code;
    auto client = MakeClient(FastRetries(server.target()));
    auto response = client->Classify(Request());
    EXPECT_EQ(static_cast<int>(response.status().code()), static_cast<int>(code));
    EXPECT_EQ(server.service.calls.load(), 1) << StatusCodeName(code);
  }
}

TEST(ClientLibTest, OverallDeadlineBoundsRetries) {
  FakeServer server("a");
  server.service.fail_first = 1000;
  ClientOptions o = FastRetries(server.target());
  o.retry.max_attempts = 1000;
  o.retry.initial_backoff = absl::Milliseconds(40);
  o.retry.multiplier = 1;
  o.timeout_ms = 300;
  auto client = MakeClient(o);
  ASSERT_TRUE(client->WaitForConnected(absl::Seconds(5)));
  const absl::Time start = absl::Now();
  auto response = client->Classify(Request());
  const absl::Duration took = absl::Now() - start;
  // The last attempt's code: UNAVAILABLE (the server's answer), or
  // DEADLINE_EXCEEDED when the overall deadline ran out during that attempt
  // or its backoff (seen in a CI run on a loaded machine). Both end the call
  // in time; what this test bounds is the time and the attempts.
  EXPECT_TRUE(response.status().code() == absl::StatusCode::kUnavailable ||
              response.status().code() == absl::StatusCode::kDeadlineExceeded)
      << response.status();
  EXPECT_LT(took, absl::Milliseconds(800));
  EXPECT_GE(server.service.calls.load(), 2);
  EXPECT_LE(server.service.calls.load(), 8);  // 300 ms / 40 ms, plus the first attempt
}

TEST(ClientLibTest, AsyncRetriesAndSucceeds) {
  FakeServer server("a");
  server.service.fail_first = 2;
  auto client = MakeClient(FastRetries(server.target()));
  absl::Notification done;
  grpc::Status status;
  std::string model;
  client->ClassifyAsync(Request(), [&](const grpc::Status& s, const v1::ClassifyResponse& r) {
    status = s;
    model = r.model();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(model, "a");
  EXPECT_EQ(server.service.calls.load(), 3);
}

TEST(ClientLibTest, AsyncGivesUpWithTheLastCode) {
  FakeServer server("a");
  server.service.fail_first = 100;
  ClientOptions o = FastRetries(server.target());
  o.retry.max_attempts = 2;
  auto client = MakeClient(o);
  absl::Notification done;
  grpc::StatusCode code = grpc::StatusCode::OK;
  client->ClassifyAsync(Request(), [&](const grpc::Status& s, const v1::ClassifyResponse&) {
    code = s.error_code();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.service.calls.load(), 2);
}

TEST(ClientLibTest, SendsTheBearerToken) {
  FakeServer server("a");
  ClientOptions o = FastRetries(server.target());
  auto plain = MakeClient(o);
  ASSERT_TRUE(plain->Classify(Request()).ok());
  EXPECT_EQ(server.service.authorization(), "<none>");
  o.token = "s3cret";
  auto with_token = MakeClient(o);
  ASSERT_TRUE(with_token->Classify(Request()).ok());
  EXPECT_EQ(server.service.authorization(), "Bearer s3cret");
}

// Calls through a client of `o` until both servers have answered (5 s at
// most: on a loaded machine the second backend may still be connecting),
// then expects a fresh 40 calls spread over both.
void ExpectSpread(const ClientOptions& o, FakeServer& a, FakeServer& b) {
  a.service.calls = 0;
  b.service.calls = 0;
  auto client = MakeClient(o);
  ASSERT_TRUE(client->WaitForConnected(absl::Seconds(5)));
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while ((a.service.calls == 0 || b.service.calls == 0) && absl::Now() < give_up) {
    ASSERT_TRUE(client->Classify(Request()).ok());
  }
  a.service.calls = 0;
  b.service.calls = 0;
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(client->Classify(Request()).ok());
  EXPECT_GE(a.service.calls.load(), 10);
  EXPECT_GE(b.service.calls.load(), 10);
}

TEST(ClientLibTest, RoundRobinSpreadsCallsPickFirstDoesNot) {
  FakeServer a("a"), b("b");
  ClientOptions o = FastRetries("ipv4:127.0.0.1:" + std::to_string(a.port) + ",127.0.0.1:" +
                                std::to_string(b.port));
  o.lb_policy = "pick_first";
  auto pick_first = MakeClient(o);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pick_first->Classify(Request()).ok());
  EXPECT_EQ(a.service.calls + b.service.calls.load(), 20);
  EXPECT_TRUE(a.service.calls == 20 || b.service.calls == 20);

  o.lb_policy = "round_robin";
  o.channel_id = 1;
  ExpectSpread(o, a, b);
}

// Issue 16, defect 4: with no policy given the client balances round-robin
// (its default service config), so a target resolving to every pod of a
// headless Service spreads calls over them.
TEST(ClientLibTest, DefaultPolicyIsRoundRobin) {
  FakeServer a("a"), b("b");
  ClientOptions o = FastRetries("ipv4:127.0.0.1:" + std::to_string(a.port) + ",127.0.0.1:" +
                                std::to_string(b.port));
  ASSERT_EQ(o.lb_policy, "");
  ExpectSpread(o, a, b);
}

TEST(ClientLibTest, HealthCheck) {
  FakeServer server("a");
  auto client = MakeClient(FastRetries(server.target()));
  auto status = client->Health("");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, "SERVING");
  server.server->GetHealthCheckService()->SetServingStatus("m", false);
  EXPECT_EQ(*client->Health("m"), "NOT_SERVING");
  EXPECT_EQ(client->Health("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(ClientLibTest, RejectsBadOptions) {
  ClientOptions o;
  o.lb_policy = "random";
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = ClientOptions();
  o.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kNotFound);
  o = ClientOptions();
  o.retry.max_attempts = 0;
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ClientLibTest, TlsWithTheCaWorksPlaintextDoesNot) {
  const std::string dir = testing::MakeTempDir("dserve_tls_");
  const auto openssl = testing::RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout",
       dir + "/key.pem", "-out", dir + "/cert.pem"});
  ASSERT_EQ(openssl.exit_code, 0) << openssl.err;
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({Slurp(dir + "/key.pem"), Slurp(dir + "/cert.pem")});
  FakeServer server("tls", grpc::SslServerCredentials(ssl));
  ClientOptions o = FastRetries(server.target());
  o.retry.max_attempts = 1;
  o.timeout_ms = 3000;
  EXPECT_EQ(MakeClient(o)->Classify(Request()).status().code(), absl::StatusCode::kUnavailable);
  o.tls_ca_file = dir + "/cert.pem";
  auto response = MakeClient(o)->Classify(Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model(), "tls");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dserve
