// Helpers of the client end-to-end tests: child processes (servers and CLI
// runs) and a minimal HTTP GET for /metrics. Test-only; not thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dserve::testing {

// A fresh directory under TMPDIR (or /tmp); the caller removes it.
std::string MakeTempDir(const std::string& prefix);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with its arguments, waits, and returns exit code and
// output (through temporary files, removed afterwards). stdin is /dev/null.
CommandResult RunCommand(const std::vector<std::string>& argv);

// A `dserve serve` child started with --listen/--metrics-listen on port 0;
// the ports are parsed from its stdout ("dserve: listening on port N",
// "dserve: metrics on port N"). The destructor sends SIGTERM, waits up to
// 10 s, then SIGKILLs; the child also gets SIGKILL if the test process dies.
class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& args,
                                                              const std::string& log_path,
                                                              absl::Duration timeout);
  ~ServerProcess();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  const std::string& log_path() const { return log_path_; }
  // Terminates now (idempotent); returns the exit status from waitpid.
  int Stop();

 private:
  ServerProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}

  pid_t pid_;
  std::string log_path_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

// GET http://127.0.0.1:port/path; returns the body of a 200 reply.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// Sum of the samples of metric `name` (Prometheus text format) whose labels
// include every `labels` pair.
double MetricSum(const std::string& text, const std::string& name,
                 const std::map<std::string, std::string>& labels);

}  // namespace dserve::testing
