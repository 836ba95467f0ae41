// HttpServer (server/net/http_server.h) on loopback, driven by the same
// library's client: routing, HEAD, 404/405, 413 with a JSON body,
// keep-alive, concurrent requests and Stop.
#include "server/net/http_server.h"

#include <httplib.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace dserve {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HttpServer> StartOnLoopback(int threads = 8, int64_t max_body = 1024) {
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  options.threads = threads;
  options.max_body_bytes = max_body;
  auto server = HttpServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return *std::move(server);
}

TEST(HttpServer, RoutesHeadAndErrors) {
  auto server = StartOnLoopback();
  server->Handle("GET", "/hello", [](const HttpRequest& req, HttpResponse* res) {
    res->body = R"({"hello":")" + req.param("name") + R"("})";
    res->headers.emplace_back("x-test", req.header("X-Thing"));
  });
  server->Handle("POST", "/echo", [](const HttpRequest& req, HttpResponse* res) { res->body = req.body(); });
  httplib::Client client("127.0.0.1", server->port());
  auto get = client.Get("/hello?name=ada", {{"x-thing", "42"}});
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, R"({"hello":"ada"})");
  EXPECT_EQ(get->get_header_value("x-test"), "42");
  EXPECT_EQ(get->get_header_value("Content-Type"), "application/json");
  auto head = client.Head("/hello");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error_type"], "not_found");
  auto wrong_method = client.Post("/hello", "{}", "application/json");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
  auto big = client.Post("/echo", std::string(4096, 'x'), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  auto error = nlohmann::json::parse(big->body);
  EXPECT_EQ(error["error_type"], "payload_too_large");
  EXPECT_THAT(error["error"].get<std::string>(), HasSubstr("1024 bytes"));
}

// The fallback runs on unmatched requests with the 404 / 405 answer already
// written (the HTTP routes count those calls); matched routes never reach it.
TEST(HttpServer, FallbackSeesTheDefaultAnswer) {
  auto server = StartOnLoopback();
  server->Handle("GET", "/hello", [](const HttpRequest&, HttpResponse* res) { res->body = "{}"; });
  std::vector<int> seen;
  server->SetFallback([&seen](const HttpRequest&, HttpResponse* res) {
    seen.push_back(res->status);
    res->headers.emplace_back("x-fallback", "1");
  });
  httplib::Client client("127.0.0.1", server->port());
  auto ok = client.Get("/hello");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error_type"], "not_found");
  EXPECT_EQ(missing->get_header_value("x-fallback"), "1");
  auto wrong_method = client.Post("/hello", "{}", "application/json");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
  server->Stop();
  EXPECT_EQ(seen, (std::vector<int>{404, 405}));
}

TEST(HttpServer, KeepAliveAndConcurrentClients) {
  auto server = StartOnLoopback(/*threads=*/8);
  std::atomic<int> served{0};
  server->Handle("GET", "/metrics", [&](const HttpRequest&, HttpResponse* res) {
    ++served;
    res->content_type = "text/plain";
    res->body = "up 1\n";
  });
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", server->port());
      client.set_keep_alive(true);
      for (int i = 0; i < 50; ++i) {
        auto r = client.Get("/metrics");
        if (r && r->status == 200 && r->body == "up 1\n") ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 400);
  EXPECT_EQ(served.load(), 400);
}

int ThreadsOfThisProcess() {
  int n = 0;
  for (const auto& unused : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Threads start when connections need them, not all at Start: a large
// --http-threads costs nothing idle, and idle keep-alive connections below
// the cap never keep a new client waiting.
TEST(HttpServer, ThreadsStartOnDemandUpToTheCap) {
  const int before = ThreadsOfThisProcess();
  auto server = StartOnLoopback(/*threads=*/256);
  EXPECT_LE(ThreadsOfThisProcess() - before, 2);  // the accept loop (and no pool)
  server->Handle("GET", "/health", [](const HttpRequest&, HttpResponse* res) { res->body = "{}"; });
  std::vector<std::unique_ptr<httplib::Client>> idle;
  for (int i = 0; i < 20; ++i) {  // 20 keep-alive connections, each made to hold a thread
    idle.push_back(std::make_unique<httplib::Client>("127.0.0.1", server->port()));
    idle.back()->set_keep_alive(true);
    ASSERT_EQ(idle.back()->Get("/health")->status, 200);
  }
  const auto start = std::chrono::steady_clock::now();
  httplib::Client fresh("127.0.0.1", server->port());
  ASSERT_EQ(fresh.Get("/health")->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
      << "a new client waited behind idle keep-alive connections";
  const int grown = ThreadsOfThisProcess() - before;
  EXPECT_GE(grown, 21);
  EXPECT_LE(grown, 30);
}

TEST(HttpServer, ReplacingARouteAndStop) {
  auto server = StartOnLoopback();
  server->Handle("GET", "/health", [](const HttpRequest&, HttpResponse* res) { res->status = 503; });
  httplib::Client client("127.0.0.1", server->port());
  EXPECT_EQ(client.Get("/health")->status, 503);
  server->Handle("GET", "/health", [](const HttpRequest&, HttpResponse* res) { res->body = "{}"; });
  EXPECT_EQ(client.Get("/health")->status, 200);
  const int port = server->port();
  server->Stop();
  server->Stop();  // idempotent
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/health"));
}

// HandlePrefix (the OIP door's /v2/models/{name}/...): exact routes first,
// then the longest matching prefix of the method; another method's prefix
// gives 405.
TEST(HttpServer, PrefixRoutes) {
  auto server = StartOnLoopback();
  auto say = [](std::string what) {
    return [what](const HttpRequest& req, HttpResponse* res) { res->body = what + " " + req.path(); };
  };
  server->HandlePrefix("GET", "/v2/models/", say("models"));
  server->HandlePrefix("GET", "/v2/models/special/", say("special"));
  server->Handle("GET", "/v2/models/stats", say("exact"));
  httplib::Client client("127.0.0.1", server->port());
  EXPECT_EQ(client.Get("/v2/models/m/versions/3/ready")->body, "models /v2/models/m/versions/3/ready");
  EXPECT_EQ(client.Get("/v2/models/special/x")->body, "special /v2/models/special/x");
  EXPECT_EQ(client.Get("/v2/models/stats")->body, "exact /v2/models/stats");
  EXPECT_EQ(client.Post("/v2/models/m/infer", "{}", "application/json")->status, 405);
  EXPECT_EQ(client.Get("/v2/model")->status, 404);
}

TEST(HttpServer, BadAddressesNameTheProblem) {
  HttpServerOptions options;
  options.listen = "nonsense";
  EXPECT_THAT(HttpServer::Start(options).status().message(), HasSubstr("HOST:PORT"));
  auto first = StartOnLoopback();
  options.listen = "127.0.0.1:" + std::to_string(first->port());
  EXPECT_THAT(HttpServer::Start(options).status().message(), HasSubstr("cannot listen"));
  options.listen = "127.0.0.1:0";
  options.tls_cert = "/nonexistent/cert.pem";
  options.tls_key = "/nonexistent/key.pem";
  EXPECT_THAT(HttpServer::Start(options).status().message(), HasSubstr("--tls-cert"));
  EXPECT_EQ(*SplitHostPort("[::1]:80"), std::make_pair(std::string("::1"), 80));
}

}  // namespace
}  // namespace dserve
