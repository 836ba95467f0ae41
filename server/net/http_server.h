// HttpServer: HTTP/1.1 (and HTTPS) on cpp-httplib, for the HTTP/JSON front
// door (server/doors/http/http_routes.h) and Prometheus scrapes (Metrics).
//
// Why cpp-httplib (docs/performance.md, "HTTP library"): Debian ships it
// built with OpenSSL (TLS without our own socket code), handlers are plain
// blocking functions (a handler may wait for its inference result), and a
// minimal server answered 28-30k keep-alive req/s at 64 clients on the
// 2-core build machine, ~100x what the models there compute, with a lower
// p99 than Boost.Beast's async server (33-38k req/s). Not prometheus-cpp's
// civetweb Exposer: it fails to start in binaries that link LibTorch.
//
// Model: one thread per connection, started when a connection finds no idle
// thread, at most `threads`. A keep-alive connection holds its thread until
// it has been idle for keep_alive_timeout, so at most `threads` clients are
// served at once; more connections wait in the accept queue. TCP_NODELAY is on (without it a
// keep-alive client waits ~40 ms per response for the delayed ACK: 1.3k
// req/s instead of 28k). HEAD is answered by the GET handler without the
// body. A body over max_body_bytes gets 413 before it is read.
//
// Thread safety: Handle/SetFallback may be called at any time, also while
// serving (the route table is guarded by a mutex); handlers run on the
// pool's threads, many at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace dserve {

struct HttpServerOptions {
  // HOST:PORT ("0.0.0.0:8080", "[::]:8080", "127.0.0.1:0"); port 0 picks one.
  std::string listen;
  // Most connections served at once (threads, started on demand; see the
  // file comment).
  int threads = 8;
  // TLS: PEM certificate and key files; with client_ca, clients must
  // present a certificate it signed (mTLS). All empty = plaintext.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Largest request body, bytes; larger gets 413.
  int64_t max_body_bytes = 4 << 20;
  // An idle keep-alive connection is closed after this (its thread freed).
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  // Reading one request (headers and body) may take at most this long.
  absl::Duration read_timeout = absl::Seconds(10);
};

// A request as the handler sees it (a view of the library's request: valid
// only during the handler call).
class HttpRequest {
 public:
  explicit HttpRequest(const httplib::Request* request) : request_(request) {}
  const std::string& method() const;
  const std::string& path() const;
  const std::string& body() const;
  // The first value of header `name` (case-insensitive), "" when absent.
  std::string header(const std::string& name) const;
  bool has_header(const std::string& name) const;
  // Query parameter `name` ("?model=x"), "" when absent.
  std::string param(const std::string& name) const;
  bool has_param(const std::string& name) const;

 private:
  const httplib::Request* request_;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse*)>;

class HttpServer {
 public:
  // Binds options.listen and starts serving on a background thread; the
  // error names the address (or the TLS file) and the problem.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options);
  ~HttpServer();  // Stop()

  // Routes `method` ("GET", "POST", ...) + exact `path` to `handler`,
  // replacing any earlier handler of that route.
  void Handle(const std::string& method, const std::string& path, HttpHandler handler);
  // Routes `method` + every path that starts with `prefix` and has no exact
  // route (the handler reads the rest of HttpRequest::path(); the longest
  // matching prefix wins), e.g. "/v2/models/" for the OIP door's
  // /v2/models/{name}[/versions/{v}]/... routes.
  void HandlePrefix(const std::string& method, const std::string& prefix, HttpHandler handler);
  // Requests no route matches: answered 404 (405 when the path exists for
  // another method) with a JSON error body. `handler`, when set, then runs
  // with that answer already in its HttpResponse (status, body) and may
  // change it or add to it (the HTTP routes count the call).
  void SetFallback(HttpHandler handler);

  int port() const { return port_; }
  bool tls() const { return tls_; }

  // Stops accepting, lets each connection finish the request it is in (an
  // idle keep-alive connection is closed within keep_alive_timeout), joins.
  // Idempotent.
  void Stop();

 private:
  HttpServer() = default;
  void Dispatch(const httplib::Request& req, HttpResponse* out);

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  bool tls_ = false;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, HttpHandler> routes_ ABSL_GUARDED_BY(mu_);
  // (method, prefix) -> handler, for HandlePrefix.
  std::map<std::pair<std::string, std::string>, HttpHandler> prefix_routes_ ABSL_GUARDED_BY(mu_);
  HttpHandler fallback_ ABSL_GUARDED_BY(mu_);
};

// The JSON error body every HTTP route uses: {"error": message,
// "error_type": type} (TEI's shape).
std::string HttpErrorBody(absl::string_view message, absl::string_view error_type);

// "HOST:PORT" -> host and port ("[::1]:80" -> "::1", 80); the error names
// the address.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& listen);

}  // namespace dserve
