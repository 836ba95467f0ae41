// `dserve serve`: start-up, signal handling and graceful drain.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "model/util/logging.h"
#include "server/cli/commands.h"
#include "server/doors/http/http_routes.h"
#include "server/net/http_server.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/options.h"
#include "server/request_path.h"
#include "server/doors/grpc/service.h"
#include "server/doors/tei/tei_service.h"
#include "server/doors/oip/oip_grpc_service.h"
#include "server/doors/oip/oip_rest.h"

namespace dserve {
namespace {

ServeOptions& Options() {
  static ServeOptions options;
  return options;
}

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServeOptions& o) {
  if (o.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  auto cert = ReadFile("--tls-cert", o.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFile("--tls-key", o.tls_key);
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca.empty()) {
    auto ca = ReadFile("--tls-client-ca", o.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

void SetHealth(grpc::Server* server, const ModelRegistry* registry, bool serving) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // every service name, "" included
  health->SetServingStatus("dserve.v1.Inference", serving);
  for (const char* name : TeiServices::ServiceNames()) health->SetServingStatus(name, serving);
  health->SetServingStatus("inference.GRPCInferenceService", serving);
  if (registry != nullptr) {
    for (const auto& m : registry->models()) health->SetServingStatus(m->name, serving);
  }
}

// The HTTP/JSON door's server (--http-listen, the --tls-* files, one thread
// per connection), also serving /metrics when --metrics-listen is the same
// address. /health says 503 until the API routes replace it.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(const ServeOptions& o, Metrics* metrics) {
  HttpServerOptions http;
  http.listen = o.http_listen;
  http.threads = o.http_threads;
  http.tls_cert = o.tls_cert;
  http.tls_key = o.tls_key;
  http.tls_client_ca = o.tls_client_ca;
  http.max_body_bytes = o.max_message_bytes;
  auto server = HttpServer::Start(http);
  if (!server.ok()) return server.status();
  (*server)->Handle("GET", "/health", [](const HttpRequest&, HttpResponse* res) {
    res->status = 503;
    res->body = R"({"status":"loading"})";
  });
  oip::RegisterOipLoadingRoutes(server->get());  // OIP health: live, not ready
  if (o.metrics_listen == o.http_listen) metrics->ServeOn(server->get());
  return server;
}

// Exit codes: 0 clean shutdown, 2 bad settings or a model that cannot load.
// SIGHUP: reload changed checkpoints (ModelRegistry::CheckNow).
int RunServe(const ServeOptions& options) {
  auto log = Logger("server");
  if (absl::Status s = ValidateServeOptions(options); !s.ok()) {
    std::cerr << "dserve serve: " << s.message() << "\n";
    return 2;
  }
  // Signals go to sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // hot reload: check the model directories now
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::optional<TokenAuth> auth;
  if (!options.auth_token_file.empty()) {
    std::string warning;
    auto token = TokenAuth::FromFile(options.auth_token_file, &warning);
    if (!token.ok()) {
      std::cerr << "dserve serve: " << token.status().message() << "\n";
      return 2;
    }
    if (!warning.empty()) std::cerr << "dserve serve: warning: " << warning << "\n";
    auth = *std::move(token);
  }
  auto credentials = Credentials(options);
  if (!credentials.ok()) {
    std::cerr << "dserve serve: " << credentials.status().message() << "\n";
    return 2;
  }
  std::unique_ptr<Metrics> metrics = Metrics::Create();
  // The HTTP/JSON door binds before the models load (a taken port fails at
  // once); its API routes are added once the request path exists.
  std::unique_ptr<HttpServer> http;
  if (!options.http_listen.empty()) {
    auto started = StartHttpServer(options, metrics.get());
    if (!started.ok()) {
      std::cerr << "dserve serve: --http-listen: " << started.status().message() << "\n";
      return 2;
    }
    http = *std::move(started);
    log->info("HTTP/JSON API on {}://{} (port {})", http->tls() ? "https" : "http", options.http_listen, http->port());
    std::cout << "dserve: http on port " << http->port() << std::endl;
    if (options.metrics_listen == options.http_listen) {
      std::cout << "dserve: metrics on port " << http->port() << std::endl;
    }
  }
  if (!options.metrics_listen.empty() && options.metrics_listen != options.http_listen) {
    auto metrics_port = metrics->Listen(options.metrics_listen);
    if (!metrics_port.ok()) {
      std::cerr << "dserve serve: --metrics-listen: " << metrics_port.status().message() << "\n";
      return 2;
    }
    log->info("metrics on http://{}/metrics (port {})", options.metrics_listen, *metrics_port);
    std::cout << "dserve: metrics on port " << *metrics_port << std::endl;
  }

  auto registry = ModelRegistry::Load(options, metrics.get());
  if (!registry.ok()) {
    std::cerr << "dserve serve: cannot load: " << registry.status().message() << "\n";
    return 2;
  }
  // The one request path under both front doors (DESIGN §8).
  RequestPath path(registry->get(), metrics.get(), options, std::move(auth));
  InferenceService service(&path);
  TeiServices tei_services(&path);  // tei.v1 (TEI's gRPC API) beside dserve.v1
  if (http) RegisterHttpRoutes(http.get(), &path);
  oip::OipGrpcService oip_service(&path);  // inference.GRPCInferenceService (OIP) beside dserve.v1
  if (http) oip::RegisterOipRoutes(http.get(), &path);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, *credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  if (options.max_connection_age_s > 0) {
    // GOAWAY on old connections so clients re-resolve and rebalance.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(options.max_connection_age_s * 1000));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options.max_connection_age_grace_s * 1000));
  }
  builder.RegisterService(&service);
  tei_services.Register(&builder);
  builder.RegisterService(&oip_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "dserve serve: cannot listen on " << options.listen << "\n";
    if (http) http->Stop();
    (*registry)->Shutdown(/*drain=*/false, absl::ZeroDuration());
    return 2;
  }
  SetHealth(server.get(), registry->get(), true);
  // Tests and scripts wait for this line (the port is the bound one, so
  // --listen 127.0.0.1:0 works).
  log->info("serving {} models on port {} ({})", (*registry)->models().size(), port,
            options.tls_cert.empty() ? "plaintext" : "TLS");
  std::cout << "dserve: listening on port " << port << std::endl;

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    log->info("SIGHUP: checking the model directories for new checkpoints");
    (*registry)->CheckNow();
  }
  log->info("signal {}: draining (up to {}s)", signal_number, options.drain_timeout_s);
  // Refuse new calls first, then tell health checkers: whoever sees
  // NOT_SERVING can rely on new calls getting UNAVAILABLE.
  path.StartDraining();
  SetHealth(server.get(), registry->get(), false);
  // Ends health Watch streams (they would hold Shutdown to its deadline).
  if (auto* health = server->GetHealthCheckService()) health->Shutdown();
  // Then GOAWAY at once: grpc::Server::Shutdown sends it on every connection
  // and closes the listener immediately (clients stop sending here and
  // reconnect to another replica), then waits up to the deadline for the
  // calls it accepted, which the workers keep running meanwhile. It blocks,
  // so it runs beside the pools' drain below, not after it.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(options.drain_timeout_s);
  std::thread goaway([&server, deadline] { server->Shutdown(deadline); });
  (*registry)->Shutdown(/*drain=*/true, absl::Seconds(options.drain_timeout_s));
  goaway.join();
  server->Wait();
  // New HTTP calls got 503 since StartDraining and the accepted ones are
  // done (the pools drained): close the HTTP door before `path` goes.
  if (http) http->Stop();
  log->info("stopped");
  return 0;
}

}  // namespace

void RegisterServerCommands(CLI::App& app) {
  auto* serve = app.add_subcommand("serve", "Serve models over gRPC (classify, answer, rerank)");
  AddServeFlags(serve, &Options());
}

int RunServerCommands(CLI::App& app) {
  if (app.got_subcommand("serve")) {
    CLI::App* serve = app.get_subcommand("serve");
    if (!Options().config_file.empty()) {
      if (absl::Status s = ApplyConfigFile(serve, Options().config_file, &Options()); !s.ok()) {
        std::cerr << "dserve serve: " << s.message() << "\n";
        return 2;
      }
    }
    return RunServe(Options());
  }
  std::cerr << "dserve: no subcommand\n";
  return 2;
}

}  // namespace dserve
