// RequestPath: the one request path under both front doors (DESIGN §8).
//
// gRPC (server/doors/grpc/service.cc) and HTTP/JSON (server/doors/http/) are adapters: they
// read their wire format into the v1 request messages, call the methods
// below, and write the v1 response (or the status) back in their own
// format. Everything else is decided here, once: auth, draining, deadlines,
// the pre-processing cap, request limits, queue admission, tokenization,
// batching, decode, model versions and the request metrics.
//
// A call, cheapest checks first:
//   1. Admit(call, method, &ticket): auth, draining, a deadline already
//      past, a pre-processing slot (refused at once when all are taken).
//   2. the adapter parses its body into a v1 request (a parse error goes to
//      Refuse(), so it is counted);
//   3. Classify / Answer / Rerank(call, request, ticket, done): the model
//      (NOT_FOUND / FAILED_PRECONDITION), the request limits, whether the
//      model's queue would take it now, tokenization (the ticket is released
//      after it), enqueue; decode runs on a completion thread (never on an
//      inference worker) once every item is done, then `done` runs there.
//
// `done` is called exactly once: inline (on the caller's thread) when the
// call is refused before it was queued, else on a completion thread. The
// response it gets carries model and model_version. Request duration
// (dserve_request_duration_seconds) runs from CallInfo::received to `done`.
//
// Thread safety: every method may be called from any thread. The path must
// outlive every call it started (serve_command stops the front doors and
// drains the pools before destroying it).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dserve/v1/inference.pb.h"
#include "model/tokenizer/tokenizer.h"
#include "server/auth.h"
#include "server/options.h"
#include "server/preprocess_gate.h"
#include "server/protocol.h"

namespace dserve {

class Metrics;
class ModelRegistry;
class CompletionExecutor;
class DeadlineTimer;
struct ServedModel;

// What a front door knows of a call before it reads the body.
struct CallInfo {
  Protocol protocol = Protocol::kGrpc;
  // From RequestIdFor(): the client's x-request-id or a new one. Logged
  // with errors; front doors echo it (trailer / response header).
  std::string request_id;
  // The Authorization header / metadata value as sent ("" when absent).
  std::string authorization;
  // Absolute; InfiniteFuture when the client set none.
  absl::Time deadline = absl::InfiniteFuture();
  // When the front door received the call: request duration starts here
  // (so it includes parse and tokenization).
  absl::Time received = absl::Now();
  // Scheduling priority (higher first); nullopt = the model's default.
  std::optional<int> priority;
};

// The client's x-request-id when it is 1..64 printable ASCII characters,
// else a new random one (16 hex digits).
std::string RequestIdFor(absl::string_view client_value);

// gRPC's name of a status code: "OK", "INVALID_ARGUMENT", ... (the `code`
// label of the metrics).
std::string StatusCodeName(const absl::Status& status);

// A call in flight. Cancel() (the client went away) drops its queued items
// before compute; `done` still runs once, with CANCELLED.
class CallHandle {
 public:
  virtual ~CallHandle() = default;
  virtual void Cancel() = 0;
};

// `response` is non-null iff `status` is OK.
template <typename Response>
using Completion = std::function<void(const absl::Status& status, std::unique_ptr<Response> response)>;

class RequestPath {
 public:
  // Not owned: `registry` and `metrics` must outlive the path. Starts the
  // completion threads (options.completion_threads).
  RequestPath(const ModelRegistry* registry, Metrics* metrics, const ServeOptions& options,
              std::optional<TokenAuth> auth);
  ~RequestPath();  // joins the completion threads (after finishing queued completions)
  RequestPath(const RequestPath&) = delete;
  RequestPath& operator=(const RequestPath&) = delete;

  // Step 1 (see the file comment). `method` is "classify" | "answer" |
  // "rerank" | "list_models" | the HTTP route's name, for the metrics of a
  // refusal. On OK, `*ticket` holds a pre-processing slot; pass it on. A
  // refusal is already counted: the front door only sends it.
  absl::Status Admit(const CallInfo& call, const char* method, PreprocessGate::Ticket* ticket);
  // Auth and draining only (ListModels, the HTTP info routes): no slot.
  absl::Status CheckCaller(const CallInfo& call) const;

  // Counts a call the front door refused itself (a body it could not parse,
  // an unknown route) under dserve_requests_total{model=""}.
  void Refuse(const CallInfo& call, const char* method, const absl::Status& status);

  // Step 3 (see the file comment). Returns the call's handle, or nullptr
  // when `done` already ran (refused before it was queued).
  std::shared_ptr<CallHandle> Classify(const CallInfo& call, std::unique_ptr<v1::ClassifyRequest> request,
                                       PreprocessGate::Ticket ticket, Completion<v1::ClassifyResponse> done);
  std::shared_ptr<CallHandle> Answer(const CallInfo& call, std::unique_ptr<v1::AnswerRequest> request,
                                     PreprocessGate::Ticket ticket, Completion<v1::AnswerResponse> done);
  std::shared_ptr<CallHandle> Rerank(const CallInfo& call, std::unique_ptr<v1::RerankRequest> request,
                                     PreprocessGate::Ticket ticket, Completion<v1::RerankResponse> done);

  // Tokenizes `texts` with model `model`'s tokenizer, whole (no truncation,
  // pieces returned), for HTTP /tokenize: after Admit (auth, draining, the
  // pre-processing slot, released here once the texts are tokenized), the
  // model (NOT_FOUND), the request limits (--max-texts-per-request,
  // --max-text-bytes: INVALID_ARGUMENT naming inputs[i]) and the tokenizer's
  // own errors (INVALID_ARGUMENT). Synchronous: no queue, no model forward.
  // Counted in dserve_requests_total{task="tokenize"} (under the model once
  // it is found, else model=""), every outcome; the tokenizing time in
  // dserve_tokenization_duration_seconds{model}.
  absl::StatusOr<std::vector<Encoding>> Tokenize(const CallInfo& call, const std::string& model,
                                                 const std::vector<std::string>& texts, PreprocessGate::Ticket ticket);

  // The models as served now (CheckCaller first; counted).
  absl::StatusOr<v1::ListModelsResponse> ListModels(const CallInfo& call);

  // The model called `name` as served now, which must serve `task` ("" =
  // any): NOT_FOUND naming the served models, FAILED_PRECONDITION for
  // another task. For routes that read a model without queueing work
  // (HTTP /tokenize, /info).
  absl::StatusOr<std::shared_ptr<const ServedModel>> FindModel(const std::string& name,
                                                               absl::string_view task = "") const;
  const ModelRegistry& registry() const { return *registry_; }
  const ServeOptions& options() const { return options_; }

  // From now on new calls get UNAVAILABLE; calls already accepted finish.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

 private:
  template <typename Call, typename Request, typename Response>
  std::shared_ptr<CallHandle> Run(const CallInfo& call, std::unique_ptr<Request> request,
                                  PreprocessGate::Ticket ticket, Completion<Response> done);
  template <typename Call, typename Request>
  absl::Status PrepareAndSubmit(Call* call, const Request& request, const ServedModel& model, const CallInfo& info,
                     PreprocessGate::Ticket* ticket);

  const ModelRegistry* registry_;
  Metrics* metrics_;
  const ServeOptions options_;
  const std::optional<TokenAuth> auth_;
  std::atomic<bool> draining_{false};
  // Caps parse + tokenization in flight (--max-concurrent-preprocess).
  PreprocessGate preprocess_gate_;
  std::unique_ptr<CompletionExecutor> completions_;
  // Wakes a model's queue at a queued call's deadline (request_path.cc).
  std::unique_ptr<DeadlineTimer> deadlines_;
};

// --max-concurrent-preprocess as set, or for 0 (auto): 2 x the usable cores
// (CPU affinity), at least 4.
int PreprocessLimit(const ServeOptions& options);

}  // namespace dserve
