// A minimal HTTP/1.1 server for Prometheus scrapes: GET /metrics returns
// the text exposition produced by a callback; anything else 404.
//
// Why not prometheus::Exposer: its civetweb fails to start ("null context
// when constructing CivetServer") in any binary that also links LibTorch
// (reproduced with a 3-line program: prometheus-cpp alone works, adding
// -ltorch_cpu breaks it). Scrapes are one request per connection every few
// seconds, so one thread serving connections in turn is enough.
//
// Thread safety: Start/Stop from one thread; the callback runs on the
// exposer's thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace dserve {

class HttpExposer {
 public:
  using Handler = std::function<std::string()>;

  // Binds `listen` (HOST:PORT; port 0 picks one) and starts serving.
  static absl::StatusOr<std::unique_ptr<HttpExposer>> Start(const std::string& listen, Handler metrics);
  ~HttpExposer();  // stops and joins

  int port() const { return port_; }

 private:
  HttpExposer() = default;
  void Serve();
  void HandleConnection(int fd);

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  int port_ = 0;
  Handler metrics_;
  std::thread thread_;
};

}  // namespace dserve
