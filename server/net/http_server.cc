#include "server/net/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/util/logging.h"

namespace dserve {

const std::string& HttpRequest::method() const { return request_->method; }
const std::string& HttpRequest::path() const { return request_->path; }
const std::string& HttpRequest::body() const { return request_->body; }
std::string HttpRequest::header(const std::string& name) const { return request_->get_header_value(name.c_str()); }
bool HttpRequest::has_header(const std::string& name) const { return request_->has_header(name.c_str()); }
std::string HttpRequest::param(const std::string& name) const { return request_->get_param_value(name.c_str()); }
bool HttpRequest::has_param(const std::string& name) const { return request_->has_param(name.c_str()); }

std::string HttpErrorBody(absl::string_view message, absl::string_view error_type) {
  nlohmann::json body = {{"error", std::string(message)}, {"error_type", std::string(error_type)}};
  // Replace, not throw, on bytes that are not UTF-8 (a message may quote input).
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "' is not HOST:PORT"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "': port must be 0..65535"));
  }
  return std::make_pair(host, port);
}

namespace {

void CopyOut(const HttpResponse& from, httplib::Response& to) {
  to.status = from.status;
  for (const auto& [name, value] : from.headers) to.set_header(name.c_str(), value);
  to.set_content(from.body, from.content_type.c_str());
}

// The library's ThreadPool starts all its threads at once; this one starts a
// thread only when a connection finds none idle (up to `max`), so a large
// --http-threads costs nothing until clients come, and many idle keep-alive
// connections do not keep new ones waiting. Threads stay for reuse.
class ElasticThreadPool : public httplib::TaskQueue {
 public:
  explicit ElasticThreadPool(size_t max) : max_(max) {}
  ~ElasticThreadPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_) {
      threads_.emplace_back([this] { Work(); });
    } else {
      cv_.notify_one();
    }
  }

  // Runs the queued connections to their end, then joins.
  void shutdown() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();  // no enqueue after shutdown: threads_ is stable
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // shutting down, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

const char* ErrorTypeOf(int status) {
  switch (status) {
    case 400: return "validation";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "timeout";
    case 413: return "payload_too_large";
    case 414: return "uri_too_long";
    default: return status >= 500 ? "backend" : "validation";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options) {
  auto host_port = SplitHostPort(options.listen);
  if (!host_port.ok()) return host_port.status();
  std::unique_ptr<HttpServer> self(new HttpServer());
  if (!options.tls_cert.empty()) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls_cert.c_str(), options.tls_key.c_str(),
        options.tls_client_ca.empty() ? nullptr : options.tls_client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot set up TLS from --tls-cert ", options.tls_cert,
                                                     " and --tls-key ", options.tls_key,
                                                     options.tls_client_ca.empty() ? "" : " and --tls-client-ca ",
                                                     options.tls_client_ca, " (unreadable, not PEM, or not a pair)"));
    }
    self->server_ = std::move(ssl);
    self->tls_ = true;
  } else {
    self->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *self->server_;
  const int threads = std::max(1, options.threads);
  s.new_task_queue = [threads] { return new ElasticThreadPool(static_cast<size_t>(threads)); };
  s.set_tcp_nodelay(true);
  // The library's default also sets SO_REUSEPORT: a second server on a taken
  // port would then share it silently instead of failing.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  s.set_keep_alive_max_count(std::numeric_limits<int>::max());
  s.set_keep_alive_timeout(std::max<time_t>(1, absl::ToInt64Seconds(options.keep_alive_timeout)));
  const int64_t read_us = absl::ToInt64Microseconds(options.read_timeout);
  s.set_read_timeout(read_us / 1000000, read_us % 1000000);
  s.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  HttpServer* raw = self.get();
  auto dispatch = [raw](const httplib::Request& req, httplib::Response& res) {
    HttpResponse out;
    raw->Dispatch(req, &out);
    CopyOut(out, res);
  };
  httplib::Server::Handler handler = dispatch;
  s.Get(".*", handler);
  s.Post(".*", handler);
  s.Put(".*", handler);
  s.Delete(".*", handler);
  s.Patch(".*", handler);
  s.Options(".*", handler);
  // Errors the library produces itself (413 body too large, 400 bad
  // request line, ...) get the same JSON body as ours.
  s.set_error_handler(httplib::Server::HandlerWithResponse([max = options.max_body_bytes](const httplib::Request&,
                                                                                          httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = res.status == 413
                              ? absl::StrCat("request body is larger than the limit of ", max,
                                             " bytes (--max-message-bytes)")
                              : absl::StrCat("HTTP ", res.status);
    res.set_content(HttpErrorBody(message, ErrorTypeOf(res.status)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Logger("http")->error("{} {}: handler threw: {}", req.method, req.path, what);
    res.status = 500;
    res.set_content(HttpErrorBody("internal error (logged)", "backend"), "application/json");
  });

  const auto& [host, port] = *host_port;
  if (port == 0) {
    self->port_ = s.bind_to_any_port(host);
  } else {
    self->port_ = s.bind_to_port(host, port) ? port : -1;
  }
  if (self->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (address in use or not local)"));
  }
  auto listening_done = std::make_shared<std::atomic<bool>>(false);
  self->thread_ = std::thread([raw, listening_done] {
    raw->server_->listen_after_bind();
    listening_done->store(true);
  });
  // The library's stop() does nothing until its loop runs (is_running): wait
  // for that, so a Stop() right after Start() cannot miss it and hang.
  while (!s.is_running() && !listening_done->load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return self;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::Handle(const std::string& method, const std::string& path, HttpHandler handler) {
  absl::MutexLock lock(&mu_);
  routes_[{method, path}] = std::move(handler);
}

void HttpServer::SetFallback(HttpHandler handler) {
  absl::MutexLock lock(&mu_);
  fallback_ = std::move(handler);
}

void HttpServer::HandlePrefix(const std::string& method, const std::string& prefix, HttpHandler handler) {
  absl::MutexLock lock(&mu_);
  prefix_routes_[{method, prefix}] = std::move(handler);
}

void HttpServer::Dispatch(const httplib::Request& req, HttpResponse* out) {
  HttpHandler handler;
  bool other_method = false;
  bool it_matched = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    // HEAD is answered by GET (the library drops the body).
    const std::string& method = req.method == "HEAD" ? std::string("GET") : req.method;
    auto it = routes_.find({method, req.path});
    if (it != routes_.end()) {
      handler = it->second;
      it_matched = true;
    } else {
      size_t longest = 0;
      for (const auto& [route, prefix_handler] : prefix_routes_) {
        if (req.path.compare(0, route.second.size(), route.second) != 0 || route.second.size() < longest) continue;
        if (route.first == method) {
          longest = route.second.size();
          handler = prefix_handler;
          it_matched = true;
        } else {
          other_method = true;
        }
      }
      if (it_matched) other_method = false;
    }
    if (!it_matched) {
      for (const auto& [route, unused] : routes_) other_method |= route.second == req.path;
      handler = fallback_;
    }
  }
  HttpRequest request(&req);
  if (it_matched) {
    handler(request, out);
    return;
  }
  out->status = other_method ? 405 : 404;
  out->body = HttpErrorBody(other_method ? absl::StrCat(req.method, " is not allowed on ", req.path)
                                         : absl::StrCat("no route ", req.method, " ", req.path),
                            ErrorTypeOf(out->status));
  if (handler) handler(request, out);
}

}  // namespace dserve
