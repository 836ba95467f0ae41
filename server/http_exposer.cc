#include "server/http_exposer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dserve {
namespace {

constexpr size_t kMaxRequestBytes = 16 << 10;
// The whole request must arrive within this time: connections are served
// one at a time, so a client trickling bytes must not hold /metrics.
constexpr int kIoTimeoutMs = 2000;

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpExposer>> HttpExposer::Start(const std::string& listen, Handler metrics) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("'", listen, "' is not HOST:PORT"));
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &result); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", listen, "': ", gai_strerror(rc)));
  }
  std::unique_ptr<HttpExposer> exposer(new HttpExposer());
  std::string error = "no address";
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      exposer->listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(result);
  if (exposer->listen_fd_ < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(exposer->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  exposer->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(exposer->wake_fd_, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  exposer->metrics_ = std::move(metrics);
  exposer->thread_ = std::thread(&HttpExposer::Serve, exposer.get());
  return exposer;
}

HttpExposer::~HttpExposer() {
  if (thread_.joinable()) {
    const char byte = 1;
    (void)!write(wake_fd_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void HttpExposer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        HandleConnection(fd);
        close(fd);
      }
    }
  }
}

void HttpExposer::HandleConnection(int fd) {
  std::string request;
  char buffer[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kIoTimeoutMs);
  // ... nor one that does not read the reply.
  const timeval send_timeout{kIoTimeoutMs / 1000, (kIoTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  if (!absl::StartsWith(line, "GET ") && !absl::StartsWith(line, "HEAD ")) {
    WriteAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  const size_t path_begin = line.find(' ') + 1;
  std::string path = line.substr(path_begin, line.find(' ', path_begin) - path_begin);
  path = path.substr(0, path.find('?'));
  if (path == "/metrics") {
    WriteAll(fd, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", metrics_()));
  } else if (path == "/") {
    WriteAll(fd, Response(200, "OK", "text/plain", "dserve metrics: /metrics\n"));
  } else {
    WriteAll(fd, Response(404, "Not Found", "text/plain", "not found\n"));
  }
}

}  // namespace dserve
