#include "tests/client/test_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dserve::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TempRoot() {
  const char* tmp = getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// fork + exec with stdout/stderr to files; the child dies with the parent.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  const int in = open("/dev/null", O_RDONLY);
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

// The N of "PREFIX N" in `text`, 0 when absent.
int PortAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return 0;
  int port = 0;
  const size_t begin = at + prefix.size();
  const size_t end = text.find('\n', begin);
  if (end == std::string::npos) return 0;  // line not complete yet
  return absl::SimpleAtoi(text.substr(begin, end - begin), &port) ? port : 0;
}

}  // namespace

std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = absl::StrCat(TempRoot(), "/", prefix, "XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  std::string out_path = TempRoot() + "/dserve_cmd_out_XXXXXX";
  std::string err_path = TempRoot() + "/dserve_cmd_err_XXXXXX";
  close(mkstemp(out_path.data()));
  close(mkstemp(err_path.data()));
  const pid_t pid = Spawn(argv, out_path, err_path);
  int status = 0;
  waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  return result;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& args, const std::string& log_path, absl::Duration timeout) {
  const std::string out_path = log_path + ".out";
  std::unique_ptr<ServerProcess> server(
      new ServerProcess(Spawn(args, out_path, log_path), log_path));
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    const std::string out = ReadFile(out_path);
    server->grpc_port_ = PortAfter(out, "dserve: listening on port ");
    server->metrics_port_ = PortAfter(out, "dserve: metrics on port ");
    if (server->grpc_port_ > 0 && server->metrics_port_ > 0) return server;
    int status = 0;
    if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
      server->pid_ = 0;
      return absl::InternalError(absl::StrCat("server exited early: ", ReadFile(log_path)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("server did not report its ports: ", ReadFile(log_path)));
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = 0;
  return status;
}

ServerProcess::~ServerProcess() { Stop(); }

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, ": ", strerror(errno)));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write");
  }
  std::string reply;
  char buffer[65536];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) reply.append(buffer, n);
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  if (!absl::StartsWith(reply, "HTTP/1.") || body == std::string::npos ||
      reply.find(" 200 ") > reply.find("\r\n")) {
    return absl::InternalError(absl::StrCat("bad reply: ", reply.substr(0, 200)));
  }
  return reply.substr(body + 4);
}

double MetricSum(const std::string& text, const std::string& name,
                 const std::map<std::string, std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    const size_t close_brace = line.rfind('}');
    if (close_brace == absl::string_view::npos) continue;
    const absl::string_view label_text = line.substr(name.size(), close_brace - name.size() + 1);
    bool match = true;
    for (const auto& [key, value] : labels) {
      match = match && absl::StrContains(label_text, absl::StrCat(key, "=\"", value, "\""));
    }
    double v = 0;
    if (match && absl::SimpleAtod(line.substr(close_brace + 1), &v)) sum += v;
  }
  return sum;
}

}  // namespace dserve::testing
