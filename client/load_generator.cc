#include "client/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dserve {
namespace {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

double MillisBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

class LoadRunner {
 public:
  LoadRunner(const LoadOptions& options, std::vector<std::unique_ptr<Client>> clients,
             std::vector<LoadRequest> inputs)
      : options_(options), clients_(std::move(clients)), inputs_(std::move(inputs)) {
    if (options_.protocol == LoadOptions::Protocol::kOip) {
      for (const LoadRequest& input : inputs_) oip_inputs_.push_back(ToModelInfer(input));
    }
  }

  LoadReport Run() {
    start_ = SteadyClock::now();
    measure_start_ = start_ + Seconds(options_.warmup_s);
    std::thread scheduler;
    if (options_.rps > 0) {
      scheduler = std::thread([this] { RunOpenLoop(); });
    } else {
      StartClosedLoop();
    }
    WaitForEnd();
    if (scheduler.joinable()) scheduler.join();
    absl::MutexLock lock(&mu_);
    const double elapsed_s = samples_.empty() ? 0 : MillisBetween(measure_start_, last_done_) / 1e3;
    LoadReport report = Summarize(samples_, elapsed_s);
    if (options_.duration_s > 0) ApplyWindowRates(window_, options_.duration_s, &report);
    return report;
  }

 private:
  // Claims the next call, sent (or scheduled) at `send_time`. False once the
  // run sends no more; `counted` says whether the call is past warm-up.
  bool Reserve(TimePoint send_time, bool* counted) {
    absl::MutexLock lock(&mu_);
    return ReserveLocked(send_time, counted);
  }

  bool ReserveLocked(TimePoint send_time, bool* counted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopped_) return false;
    *counted = send_time >= measure_start_;
    if (*counted) {
      const bool enough = options_.requests > 0
                              ? counted_reserved_ >= options_.requests
                              : send_time >= measure_start_ + Seconds(options_.duration_s);
      if (enough) {
        stopped_ = true;
        return false;
      }
      ++counted_reserved_;
    }
    ++in_flight_;
    return true;
  }

  void Issue(TimePoint send_time, bool counted) {
    const uint64_t n = next_input_.fetch_add(1, std::memory_order_relaxed);
    const LoadRequest& input = inputs_[n % inputs_.size()];
    const Client& client = *clients_[n % clients_.size()];
    sent_.fetch_add(1, std::memory_order_relaxed);
    const int items = input.items;
    auto done = [this, send_time, counted, items](const grpc::Status& status, const auto&) {
      OnDone(send_time, counted, items, status.error_code());
    };
    if (options_.protocol == LoadOptions::Protocol::kOip) {
      client.ModelInferAsync(oip_inputs_[n % oip_inputs_.size()], done);
      return;
    }
    switch (input.task) {
      case LoadTask::kClassify: client.ClassifyAsync(input.classify, done); break;
      case LoadTask::kAnswer: client.AnswerAsync(input.answer, done); break;
      case LoadTask::kRerank: client.RerankAsync(input.rerank, done); break;
    }
  }

  // Runs on a gRPC callback thread: records, and in the closed loop sends
  // the next call (never blocks). The next call is claimed in the same
  // critical section that retires this one, so the run cannot be seen as
  // finished (and destroyed) while this callback still uses it.
  void OnDone(TimePoint send_time, bool counted, int items, grpc::StatusCode code) {
    const TimePoint now = SteadyClock::now();
    bool next = false;
    bool next_counted = false;
    {
      absl::MutexLock lock(&mu_);
      ++done_;
      if (counted) {
        samples_.push_back({MillisBetween(send_time, now), code, items});
        last_done_ = std::max(last_done_, now);
      }
      if (now >= measure_start_ && now < measure_start_ + Seconds(options_.duration_s)) {
        ++window_.completed;
        if (code == grpc::StatusCode::OK) {
          ++window_.ok;
          window_.ok_items += items;
        }
      }
      if (options_.rps == 0) next = ReserveLocked(now, &next_counted);
      --in_flight_;
    }
    if (next) Issue(now, next_counted);
  }

  void StartClosedLoop() {
    for (int i = 0; i < options_.concurrency; ++i) {
      const TimePoint now = SteadyClock::now();
      bool counted = false;
      if (!Reserve(now, &counted)) break;
      Issue(now, counted);
    }
  }

  // Call k goes at start + k / rps whatever happened to earlier calls.
  void RunOpenLoop() {
    const double interval_s = 1.0 / options_.rps;
    for (int64_t k = 0;; ++k) {
      const TimePoint at = start_ + Seconds(k * interval_s);
      bool counted = false;
      if (!Reserve(at, &counted)) break;
      std::this_thread::sleep_until(at);
      Issue(at, counted);
    }
  }

  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ && in_flight_ == 0; }

  void WaitForEnd() {
    int64_t done_before = 0;
    TimePoint before = SteadyClock::now();
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(this, &LoadRunner::Finished), absl::Seconds(1))) {
      if (options_.progress == nullptr) continue;
      const TimePoint now = SteadyClock::now();
      const double rps = (done_ - done_before) / (MillisBetween(before, now) / 1e3);
      done_before = done_;
      before = now;
      PrintProgress(rps);
    }
    if (options_.progress != nullptr && options_.progress_tty) *options_.progress << "\n";
  }

  void PrintProgress(double rps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<double> ok;
    for (const LoadSample& s : samples_) {
      if (s.code == grpc::StatusCode::OK) ok.push_back(s.latency_ms);
    }
    std::sort(ok.begin(), ok.end());
    const std::string line = absl::StrFormat(
        "%s sent %d  done %d  %.1f req/s  p50 %.2f ms  p99 %.2f ms",
        SteadyClock::now() < measure_start_ ? "[warm-up]" : "[load]",
        sent_.load(std::memory_order_relaxed), done_, rps, PercentileOfSorted(ok, 50),
        PercentileOfSorted(ok, 99));
    if (options_.progress_tty) {
      *options_.progress << "\r\033[K" << line << std::flush;
    } else {
      *options_.progress << line << std::endl;
    }
  }

  const LoadOptions options_;
  const std::vector<std::unique_ptr<Client>> clients_;
  const std::vector<LoadRequest> inputs_;
  std::vector<inference::ModelInferRequest> oip_inputs_;  // with --protocol oip: inputs_ as ModelInfer
  TimePoint start_;
  TimePoint measure_start_;
  std::atomic<uint64_t> next_input_{0};
  std::atomic<int64_t> sent_{0};

  absl::Mutex mu_;
  std::vector<LoadSample> samples_ ABSL_GUARDED_BY(mu_);
  TimePoint last_done_ ABSL_GUARDED_BY(mu_);
  // Replies inside [measure_start_, measure_start_ + duration_s).
  WindowCounts window_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t counted_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Backends the target lists explicitly: 2 for "ipv4:a:1,b:2" (likewise ipv6:
// and unix:), 1 for anything else (a single host:port, or a dns: name whose
// address count is only known to the resolver).
int ListedBackends(const std::string& target) {
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "unix:"}) {
    if (absl::StartsWith(target, scheme)) {
      int n = 0;
      for (absl::string_view a : absl::StrSplit(target.substr(scheme.size()), ',')) {
        if (!a.empty()) ++n;
      }
      return std::max(n, 1);
    }
  }
  return 1;
}

// Round-robin only picks backends whose connection is READY, and the channel
// counts as connected once the first one is; until the others connect every
// call goes to the first, which skews the measured split (under load, a third
// of a short run). So before measuring, probe with health checks (each goes to
// the next ready backend) until every listed backend has answered one, or the
// timeout passes. Returns how many distinct backends answered.
int WaitForListedBackends(const Client& client, int listed, absl::Time deadline) {
  std::set<std::string> answered;
  while (static_cast<int>(answered.size()) < listed && absl::Now() < deadline) {
    std::string peer;
    const size_t before = answered.size();
    if (client.Health("", &peer).ok() && !peer.empty()) answered.insert(peer);
    if (answered.size() == before) absl::SleepFor(absl::Milliseconds(20));
  }
  return static_cast<int>(answered.size());
}

}  // namespace

absl::Status ValidateLoadOptions(const LoadOptions& o) {
  if ((o.requests > 0) == (o.duration_s > 0)) {
    return absl::InvalidArgumentError("give exactly one of --requests N (> 0) and --duration-s S (> 0)");
  }
  if (o.requests < 0 || o.duration_s < 0) {
    return absl::InvalidArgumentError("--requests and --duration-s must be positive");
  }
  if (o.concurrency < 0 || o.rps < 0) {
    return absl::InvalidArgumentError("--concurrency and --rps must be positive");
  }
  if (o.concurrency > 0 && o.rps > 0) {
    return absl::InvalidArgumentError("give at most one of --concurrency N and --rps R");
  }
  if (o.warmup_s < 0) return absl::InvalidArgumentError("--warmup-s must be >= 0");
  if (o.channels < 1) return absl::InvalidArgumentError("--channels must be >= 1");
  return absl::OkStatus();
}

absl::StatusOr<LoadReport> RunLoad(const ClientOptions& client_options, const LoadOptions& options,
                                   std::vector<LoadRequest> inputs) {
  LoadOptions o = options;
  if (o.concurrency == 0 && o.rps == 0) o.concurrency = 1;
  if (absl::Status s = ValidateLoadOptions(o); !s.ok()) return s;
  if (inputs.empty()) return absl::InvalidArgumentError("no inputs");
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < o.channels; ++i) {
    ClientOptions c = client_options;
    c.channel_id = client_options.channel_id + i;
    auto client = Client::Create(c);
    if (!client.ok()) return client.status();
    if (!(*client)->WaitForConnected(absl::Seconds(o.connect_timeout_s))) {
      return absl::UnavailableError(absl::StrFormat("cannot connect to %s within %.0f s",
                                                    c.target, o.connect_timeout_s));
    }
    const int listed = ListedBackends(c.target);
    if (listed > 1 && c.lb_policy != "pick_first") {
      const int answered = WaitForListedBackends(
          **client, listed, absl::Now() + absl::Seconds(o.connect_timeout_s));
      if (answered < listed) {
        std::cerr << absl::StrFormat(
            "warning: %d of the %d backends in %s answered a health check within %.0f s; "
            "calls go to those that are connected\n",
            answered, listed, c.target, o.connect_timeout_s);
      }
    }
    clients.push_back(*std::move(client));
  }
  LoadRunner runner(o, std::move(clients), std::move(inputs));
  return runner.Run();
}

}  // namespace dserve
