#include "server/request_path.h"

#include <sched.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/decode/decode.h"
#include "model/tokenizer/utf8.h"
#include "model/util/logging.h"
#include "server/completion_executor.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request_validation.h"

namespace dserve {

const char* ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kHttp: return "http";
    case Protocol::kTeiGrpc: return "tei-grpc";
    case Protocol::kOip: return "oip";
    case Protocol::kGrpc: break;
  }
  return "grpc";
}

std::string StatusCodeName(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = c == ' ' ? '_' : absl::ascii_toupper(static_cast<unsigned char>(c));
  return name;
}

std::string RequestIdFor(absl::string_view client_value) {
  if (!client_value.empty() && client_value.size() <= 64 &&
      std::all_of(client_value.begin(), client_value.end(), [](char c) { return c > 32 && c < 127; })) {
    return std::string(client_value);
  }
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%016x", rng());
}

namespace {

using ModelRef = std::shared_ptr<const ServedModel>;

// What request validation needs of a served model.
ModelInputSpec InputSpec(const ServedModel& m) {
  ModelInputSpec spec;
  spec.tokenizer = m.tokenizer.get();
  spec.max_length = static_cast<int>(m.max_length);
  spec.doc_stride = m.model->config().dserve.qa.doc_stride;
  spec.type_ids = m.model->config().type_vocab_size > 0;
  return spec;
}

void LogIfInternal(const CallInfo& info, absl::string_view model, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInternal) return;
  Logger("server")->error("request {}: model {}: {}", info.request_id,
                          model.empty() ? std::string("-") : std::string(model), status.ToString());
}

}  // namespace

// Wakes a model's queue when a queued call's deadline passes, so that its
// items end DEADLINE_EXCEEDED then, even while every worker is busy (a
// worker only looks at the queue when it is free). gRPC cancels a call at
// its client deadline by itself; HTTP deadlines and the server-side queue
// time (--max-queue-time-ms) have only this.
class DeadlineTimer {
 public:
  DeadlineTimer() : thread_([this] { Loop(); }) {}
  ~DeadlineTimer() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  // At `when`, calls `wake` unless `alive` has expired by then.
  void At(absl::Time when, std::weak_ptr<void> alive, std::function<void()> wake) {
    if (when == absl::InfiniteFuture()) return;
    absl::MutexLock lock(&mu_);
    timers_.emplace(when, Entry{std::move(alive), std::move(wake)});
    // Calls usually finish long before their deadline: now and then drop
    // the entries of finished calls so the map holds about the live ones.
    if (timers_.size() >= 2 * swept_size_ + 1024) {
      for (auto it = timers_.begin(); it != timers_.end();) {
        it = it->second.alive.expired() ? timers_.erase(it) : std::next(it);
      }
      swept_size_ = timers_.size();
    }
  }

 private:
  struct Entry {
    std::weak_ptr<void> alive;
    std::function<void()> wake;
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      const absl::Time next = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first;
      if (next > absl::Now()) {
        next_ = next;
        mu_.AwaitWithDeadline(absl::Condition(
                                  +[](DeadlineTimer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
                                    return t->stopping_ || (!t->timers_.empty() && t->timers_.begin()->first < t->next_);
                                  },
                                  this),
                              next);
        continue;
      }
      std::vector<Entry> due;
      while (!timers_.empty() && timers_.begin()->first <= absl::Now()) {
        due.push_back(std::move(timers_.begin()->second));
        timers_.erase(timers_.begin());
      }
      mu_.Unlock();
      for (Entry& e : due) {
        if (auto held = e.alive.lock()) e.wake();
      }
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  std::multimap<absl::Time, Entry> timers_ ABSL_GUARDED_BY(mu_);
  // The earliest deadline the loop is sleeping towards (an earlier new one wakes it).
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  size_t swept_size_ ABSL_GUARDED_BY(mu_) = 0;  // entries left by the last sweep
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

namespace {

// ------------------------------------------------------------- ModelCall --

// The state of one call that runs items on a model. Shared by the items'
// callbacks, the completion task and the front door's handle; the call
// holds the model snapshot it started with, so a hot reload never changes
// the model under it (and its version is the one that computed the reply).
class ModelCall : public CallHandle, public std::enable_shared_from_this<ModelCall> {
 public:
  ModelCall(CallInfo info, ModelRef model, CompletionExecutor* completions, DeadlineTimer* timer)
      : info_(std::move(info)), model_(std::move(model)), completions_(completions), timer_(timer),
        cancelled_(std::make_shared<std::atomic<bool>>(false)) {}

  void Cancel() override {
    cancelled_->store(true, std::memory_order_release);
    model_->workers->Wake();
  }

  // Queues one item per input. On refusal returns the error and no item
  // callback runs (the caller finishes the call with it).
  absl::Status Submit(std::vector<ItemInput> inputs, absl::Time item_deadline, int priority) {
    const size_t n = inputs.size();
    tokens_ = 0;
    outputs_.assign(n, ItemOutput());
    remaining_.store(n);
    std::vector<ItemTask> tasks;
    tasks.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      ItemTask task;
      task.num_tokens = static_cast<int64_t>(inputs[i].ids.size());
      tokens_ += task.num_tokens;
      task.deadline = item_deadline;
      task.priority = priority;
      task.cancelled = cancelled_;
      task.payload = std::move(inputs[i]);
      // The shared_ptr keeps the call alive until its last item is done.
      task.done = [self = shared_from_this(), i](absl::StatusOr<ItemOutput> out) {
        self->OnItemDone(i, std::move(out));
      };
      tasks.push_back(std::move(task));
    }
    absl::Status status = model_->workers->Submit(std::move(tasks));
    // The items are dropped at their deadline, busy workers or not. gRPC
    // cancels a call at its own deadline (Cancel() wakes the queue), so the
    // timer is only needed for HTTP and for the server's queue time limit.
    const bool grpc_cancels_in_time = (info_.protocol == Protocol::kGrpc || info_.protocol == Protocol::kTeiGrpc) &&
                                      item_deadline >= info_.deadline;
    if (status.ok() && !grpc_cancels_in_time) {
      // Runs only while the call (which holds the model) is alive.
      const ServedModel* model = model_.get();
      timer_->At(item_deadline, weak_from_this(), [model] { model->workers->Wake(); });
    }
    return status;
  }

  // Before Submit: run on `model` instead (a hot reload replaced the one
  // the call started with; see RequestPath::Run).
  void Retarget(ModelRef model) { model_ = std::move(model); }

  // Finishes a call refused before it was queued (counted under the model).
  void FinishRefused(const absl::Status& status) { Finish(status); }

 protected:
  // Builds the response from outputs_ once every item succeeded.
  virtual absl::Status Decode() = 0;
  // Hands the status (and, when OK, the response) to the front door.
  virtual void Deliver(const absl::Status& status) = 0;

  template <typename Response>
  void FillCommon(Response* response) const {
    response->set_model(model_->name);
    response->set_model_version(model_->version);
    v1::Usage* usage = response->mutable_usage();
    usage->set_tokens(static_cast<uint64_t>(tokens_));
    usage->set_items(static_cast<uint32_t>(outputs_.size()));
    absl::Duration queue, inference;
    for (const auto& o : outputs_) {
      queue = std::max(queue, o.queue_wait);
      inference = std::max(inference, o.inference);
    }
    v1::Timing* timing = response->mutable_timing();
    timing->set_total_us(static_cast<uint64_t>(absl::ToInt64Microseconds(absl::Now() - info_.received)));
    timing->set_queue_us(static_cast<uint64_t>(absl::ToInt64Microseconds(queue)));
    timing->set_inference_us(static_cast<uint64_t>(absl::ToInt64Microseconds(inference)));
  }

  const ServedModel& model() const { return *model_; }
  std::vector<ItemOutput> outputs_;

 private:
  // On the thread that completed item i (an inference worker, or the one
  // that dropped it); the last item hands the call to a completion thread.
  void OnItemDone(size_t i, absl::StatusOr<ItemOutput> out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out.ok()) {
        outputs_[i] = *std::move(out);
      } else if (first_error_.ok()) {
        first_error_ = out.status();
      }
    }
    if (remaining_.fetch_sub(1) != 1) return;
    completions_->Post([self = shared_from_this()] { self->Complete(); });
  }

  void Complete() {
    absl::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = first_error_;
    }
    if (status.ok()) {
      status = Decode();
      if (!status.ok()) status = absl::InternalError(absl::StrCat("decode: ", status.message()));
    }
    Finish(status);
  }

  void Finish(const absl::Status& status) {
    model_->metrics->OnRequest(StatusCodeName(status), info_.protocol, absl::Now() - info_.received,
                               status.ok() ? tokens_ : 0);
    LogIfInternal(info_, model_->name, status);
    Deliver(status);
  }

  const CallInfo info_;
  ModelRef model_;  // changed only by Retarget, before Submit
  CompletionExecutor* const completions_;
  DeadlineTimer* const timer_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  int64_t tokens_ = 0;
  std::atomic<size_t> remaining_{0};
  std::mutex mu_;
  absl::Status first_error_;
};

// A call of one request / response type: holds both and the front door's
// completion.
template <typename Request, typename Response>
class TypedCall : public ModelCall {
 public:
  TypedCall(CallInfo info, ModelRef model, CompletionExecutor* completions, DeadlineTimer* timer,
            std::unique_ptr<Request> request, Completion<Response> done)
      : ModelCall(std::move(info), std::move(model), completions, timer), request_(std::move(request)),
        response_(std::make_unique<Response>()), done_(std::move(done)) {}

  const Request& request() const { return *request_; }

 protected:
  void Deliver(const absl::Status& status) override {
    Completion<Response> done = std::move(done_);
    done(status, status.ok() ? std::move(response_) : nullptr);
  }
  Response& response() { return *response_; }

 private:
  std::unique_ptr<Request> request_;
  std::unique_ptr<Response> response_;
  Completion<Response> done_;
};

class ClassifyCall final : public TypedCall<v1::ClassifyRequest, v1::ClassifyResponse> {
 public:
  using RequestType = v1::ClassifyRequest;
  using ResponseType = v1::ClassifyResponse;
  using Prepared = PreparedClassify;
  static constexpr Task kTask = Task::kClassify;
  static constexpr const char* kMethod = "classify";
  static absl::Status CheckLimits(const RequestType& r, const ServeOptions& o) { return CheckClassifyLimits(r, o); }
  // Items known before tokenizing: one per text.
  static int64_t KnownItems(const RequestType& r) { return r.texts_size(); }
  static absl::StatusOr<Prepared> Prepare(const RequestType& r, const ServeOptions& o, const ModelInputSpec& s) {
    return PrepareClassify(r, o, s);
  }
  using TypedCall::TypedCall;
  void Take(Prepared* p) {
    truncated_ = std::move(p->truncated);
    item_tokens_ = std::move(p->tokens);
  }

 private:
  absl::Status Decode() override {
    const ModelConfig& config = model().model->config();
    ClassifyDecodeOptions options;
    auto problem = ParseProblemType(config.problem_type);
    if (!problem.ok()) return problem.status();
    options.problem_type = *problem;
    options.temperature = config.dserve.temperature;
    options.top_k = request().top_k();
    options.raw_scores = request().raw_scores();
    for (size_t i = 0; i < outputs_.size(); ++i) {
      auto labels = DecodeClassification(outputs_[i].logits, model().labels, options);
      if (!labels.ok()) return labels.status();
      v1::Classification* result = response().add_results();
      for (const ScoredLabel& l : *labels) {
        v1::LabelScore* ls = result->add_labels();
        ls->set_label(l.label);
        ls->set_score(l.score);
      }
      result->set_truncated(truncated_[i]);
      result->set_tokens(item_tokens_[i]);
    }
    FillCommon(&response());
    return absl::OkStatus();
  }

  std::vector<bool> truncated_;
  std::vector<uint32_t> item_tokens_;
};

class AnswerCall final : public TypedCall<v1::AnswerRequest, v1::AnswerResponse> {
 public:
  using RequestType = v1::AnswerRequest;
  using ResponseType = v1::AnswerResponse;
  using Prepared = PreparedAnswer;
  static constexpr Task kTask = Task::kAnswer;
  static constexpr const char* kMethod = "answer";
  static absl::Status CheckLimits(const RequestType& r, const ServeOptions& o) { return CheckAnswerLimits(r, o); }
  static int64_t KnownItems(const RequestType&) { return -1; }  // windows: known after tokenizing
  static absl::StatusOr<Prepared> Prepare(const RequestType& r, const ServeOptions& o, const ModelInputSpec& s) {
    return PrepareAnswer(r, o, s);
  }
  using TypedCall::TypedCall;
  void Take(Prepared* p) {
    windows_ = std::move(p->windows);
    window_context_ = std::move(p->window_context);
  }

 private:
  absl::Status Decode() override {
    const QaSettings& qa = model().model->config().dserve.qa;
    std::vector<QaWindow> windows(windows_.size());
    for (size_t i = 0; i < windows_.size(); ++i) {
      windows[i].start_logits = outputs_[i].start_logits;
      windows[i].end_logits = outputs_[i].end_logits;
      windows[i].offsets = windows_[i].second_offsets;
      windows[i].context_index = window_context_[i];
    }
    const RequestType& r = request();
    std::vector<absl::string_view> contexts(r.contexts().begin(), r.contexts().end());
    QaDecodeOptions options;
    options.n_best = static_cast<uint32_t>(std::max(1, qa.n_best));
    options.max_answer_tokens =
        r.max_answer_tokens() > 0 ? r.max_answer_tokens() : static_cast<uint32_t>(qa.max_answer_tokens);
    options.max_answer_chars = r.max_answer_chars();
    options.null_score_diff_threshold = r.has_null_score_diff_threshold()
                                            ? r.null_score_diff_threshold()
                                            : static_cast<float>(qa.null_score_diff_threshold);
    options.top_k = std::max<uint32_t>(1, r.top_k());
    auto result = DecodeAnswer(windows, contexts, options);
    if (!result.ok()) return result.status();
    for (const QaAnswer& a : result->answers) {
      v1::Answer* answer = response().add_answers();
      answer->set_text(a.text);
      answer->set_context_index(a.context_index);
      answer->set_start_char(a.start_char);
      answer->set_end_char(a.end_char);
      answer->set_score(a.score);
      answer->set_logit_score(a.logit_score);
    }
    response().set_no_answer(result->no_answer);
    response().set_no_answer_score(result->no_answer_score);
    response().set_null_score_diff(result->null_score_diff);
    if (result->no_answer) model().metrics->OnNoAnswer();
    FillCommon(&response());
    return absl::OkStatus();
  }

  std::vector<Window> windows_;
  std::vector<uint32_t> window_context_;
};

class RerankCall final : public TypedCall<v1::RerankRequest, v1::RerankResponse> {
 public:
  using RequestType = v1::RerankRequest;
  using ResponseType = v1::RerankResponse;
  using Prepared = PreparedRerank;
  static constexpr Task kTask = Task::kRerank;
  static constexpr const char* kMethod = "rerank";
  static absl::Status CheckLimits(const RequestType& r, const ServeOptions& o) { return CheckRerankLimits(r, o); }
  static int64_t KnownItems(const RequestType&) { return -1; }  // chunks: known after tokenizing
  static absl::StatusOr<Prepared> Prepare(const RequestType& r, const ServeOptions& o, const ModelInputSpec& s) {
    return PrepareRerank(r, o, s);
  }
  using TypedCall::TypedCall;
  void Take(Prepared* p) {
    chunk_document_ = std::move(p->chunk_document);
    chunk_bytes_ = std::move(p->chunk_bytes);
  }

 private:
  absl::Status Decode() override {
    const RequestType& r = request();
    const int documents = r.documents_size();
    std::vector<std::vector<float>> logits(documents);
    std::vector<std::vector<size_t>> chunk_items(documents);
    for (size_t i = 0; i < outputs_.size(); ++i) {
      logits[chunk_document_[i]].push_back(outputs_[i].logits.at(0));
      chunk_items[chunk_document_[i]].push_back(i);
    }
    RerankDecodeOptions options;
    options.top_n = r.top_n();
    options.raw_scores = r.raw_scores();
    options.temperature = model().model->config().dserve.temperature;
    auto ranked = DecodeRerank(logits, options);
    if (!ranked.ok()) return ranked.status();
    for (const RankedResult& ranked_doc : *ranked) {
      v1::RankedDocument* doc = response().add_results();
      doc->set_index(ranked_doc.index);
      doc->set_score(ranked_doc.score);
      const std::string& text = r.documents(static_cast<int>(ranked_doc.index));
      if (r.return_documents()) doc->set_document(text);
      const ByteSpan bytes = chunk_bytes_[chunk_items[ranked_doc.index][ranked_doc.best_chunk]];
      const CodepointSpan chars = CodepointTable(text).ToCodepoints(bytes);
      doc->set_chunk_start_char(chars.begin);
      doc->set_chunk_end_char(chars.end);
    }
    FillCommon(&response());
    return absl::OkStatus();
  }

  std::vector<uint32_t> chunk_document_;
  std::vector<ByteSpan> chunk_bytes_;
};

// The deadline of a call's items: the client's, or the model's queue time
// limit (--max-queue-time-ms) from now when that comes first.
absl::Time ItemDeadline(const CallInfo& info, const ServedModel& m) {
  if (m.settings.max_queue_time_ms <= 0) return info.deadline;
  return std::min(info.deadline, absl::Now() + absl::Milliseconds(m.settings.max_queue_time_ms));
}

}  // namespace

int PreprocessLimit(const ServeOptions& options) {
  if (options.max_concurrent_preprocess > 0) return options.max_concurrent_preprocess;
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores < 1) cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(4, 2 * cores);
}

RequestPath::RequestPath(const ModelRegistry* registry, Metrics* metrics, const ServeOptions& options,
                         std::optional<TokenAuth> auth)
    : registry_(registry), metrics_(metrics), options_(options), auth_(std::move(auth)),
      preprocess_gate_(PreprocessLimit(options), [metrics](int n) { metrics->SetPreprocessing(n); }),
      completions_(std::make_unique<CompletionExecutor>(options.completion_threads)),
      deadlines_(std::make_unique<DeadlineTimer>()) {}

RequestPath::~RequestPath() = default;

absl::Status RequestPath::CheckCaller(const CallInfo& call) const {
  if (auth_ && !auth_->Check(call.authorization)) {
    return absl::UnauthenticatedError("missing or wrong bearer token (authorization: Bearer TOKEN)");
  }
  if (draining()) return absl::UnavailableError("server is draining; retry on another replica");
  return absl::OkStatus();
}

absl::Status RequestPath::Admit(const CallInfo& call, const char* method, PreprocessGate::Ticket* ticket) {
  absl::Status status = CheckCaller(call);
  if (status.ok() && call.deadline <= absl::Now()) {
    status = absl::DeadlineExceededError("deadline passed before the request was read");
  }
  if (status.ok()) {
    *ticket = preprocess_gate_.TryEnter();
    if (!*ticket) {
      status = absl::ResourceExhaustedError(absl::StrCat("server busy: ", preprocess_gate_.limit(),
                                                         " requests are being parsed and tokenized "
                                                         "(--max-concurrent-preprocess); retry with backoff"));
    }
  }
  if (!status.ok()) Refuse(call, method, status);
  return status;
}

void RequestPath::Refuse(const CallInfo& call, const char* method, const absl::Status& status) {
  metrics_->OnUnroutedRequest(method, StatusCodeName(status), call.protocol);
  LogIfInternal(call, "", status);
}

absl::StatusOr<std::shared_ptr<const ServedModel>> RequestPath::FindModel(const std::string& name,
                                                                          absl::string_view task) const {
  if (name.empty()) return absl::InvalidArgumentError("model: required");
  ModelRef m = registry_->Find(name);
  if (m == nullptr) {
    std::vector<std::string> names;
    for (const auto& served : registry_->models()) names.push_back(served->name);
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' is not served (models: ", absl::StrJoin(names, ", "), ")"));
  }
  if (!task.empty() && TaskName(m->task) != task) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' serves ", TaskName(m->task), ", not ", task));
  }
  return m;
}

// The generic part of Classify / Answer / Rerank: model, limits, queue room,
// tokenize, enqueue. `Call` supplies the task-specific steps.
template <typename Call, typename Request, typename Response>
std::shared_ptr<CallHandle> RequestPath::Run(const CallInfo& info, std::unique_ptr<Request> request,
                                             PreprocessGate::Ticket ticket, Completion<Response> done) {
  auto found = FindModel(request->model(), TaskName(Call::kTask));
  if (!found.ok()) {
    Refuse(info, Call::kMethod, found.status());
    done(found.status(), nullptr);
    return nullptr;
  }
  ModelRef m = *std::move(found);
  auto call =
      std::make_shared<Call>(info, m, completions_.get(), deadlines_.get(), std::move(request), std::move(done));
  const Request& r = call->request();
  absl::Status status;
  // A hot reload may switch the model between FindModel and Submit: the
  // replaced version's pool then refuses (UNAVAILABLE, shutting down) and
  // the call moves to the version serving now, once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    status = PrepareAndSubmit(call.get(), r, *m, info, &ticket);
    if (status.code() != absl::StatusCode::kUnavailable || draining()) break;
    ModelRef now = registry_->Find(m->name);
    if (now == nullptr || now == m) break;
    m = std::move(now);
    call->Retarget(m);
  }
  if (!status.ok()) {
    call->FinishRefused(status);
    return nullptr;
  }
  return call;
}

// One attempt of Run on model `m`: the cheap checks before tokenizing (the
// request's limits, a request that can never fit the queue -
// INVALID_ARGUMENT, as the queue would say -, whether the queue would take
// it now), tokenization (the pre-processing slot is released after it),
// enqueue.
template <typename Call, typename Request>
absl::Status RequestPath::PrepareAndSubmit(Call* call, const Request& r, const ServedModel& m,
                                           const CallInfo& info, PreprocessGate::Ticket* ticket) {
  absl::Status status = Call::CheckLimits(r, options_);
  const int64_t known_items = Call::KnownItems(r);
  const int64_t queue_items = m.settings.max_queue_items;
  if (status.ok() && known_items > queue_items) {
    m.metrics->OnRejected(RejectReason::kInvalid, known_items);
    status = absl::InvalidArgumentError(absl::StrCat("request needs ", known_items,
                                                     " items, more than the queue of model '", m.name,
                                                     "' can ever hold (max_queue_items=", queue_items,
                                                     "); split it into smaller requests"));
  }
  if (status.ok()) status = m.workers->CheckAdmission(info.deadline);
  if (!status.ok()) return status;
  const absl::Time tokenize_start = absl::Now();
  auto prepared = Call::Prepare(r, options_, InputSpec(m));
  m.metrics->OnTokenization(absl::Now() - tokenize_start);
  ticket->Release();
  if (!prepared.ok()) return prepared.status();
  call->Take(&*prepared);
  return call->Submit(std::move(prepared->inputs), ItemDeadline(info, m), info.priority.value_or(m.settings.priority));
}

std::shared_ptr<CallHandle> RequestPath::Classify(const CallInfo& call, std::unique_ptr<v1::ClassifyRequest> request,
                                                  PreprocessGate::Ticket ticket,
                                                  Completion<v1::ClassifyResponse> done) {
  return Run<ClassifyCall>(call, std::move(request), std::move(ticket), std::move(done));
}

std::shared_ptr<CallHandle> RequestPath::Answer(const CallInfo& call, std::unique_ptr<v1::AnswerRequest> request,
                                                PreprocessGate::Ticket ticket, Completion<v1::AnswerResponse> done) {
  return Run<AnswerCall>(call, std::move(request), std::move(ticket), std::move(done));
}

std::shared_ptr<CallHandle> RequestPath::Rerank(const CallInfo& call, std::unique_ptr<v1::RerankRequest> request,
                                                PreprocessGate::Ticket ticket, Completion<v1::RerankResponse> done) {
  return Run<RerankCall>(call, std::move(request), std::move(ticket), std::move(done));
}

absl::StatusOr<std::vector<Encoding>> RequestPath::Tokenize(const CallInfo& call, const std::string& model,
                                                            const std::vector<std::string>& texts,
                                                            PreprocessGate::Ticket ticket) {
  auto found = FindModel(model);
  if (!found.ok()) {
    Refuse(call, "tokenize", found.status());
    return found.status();
  }
  const ServedModel& m = **found;
  auto finish = [&](absl::Status status) {
    metrics_->OnModelRequest(m.name, "tokenize", StatusCodeName(status), call.protocol);
    LogIfInternal(call, m.name, status);
    return status;
  };
  if (static_cast<int64_t>(texts.size()) > options_.max_texts_per_request) {
    return finish(absl::InvalidArgumentError(absl::StrCat("inputs: ", texts.size(),
                                                          " texts, more than --max-texts-per-request (",
                                                          options_.max_texts_per_request, ")")));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    if (static_cast<int64_t>(texts[i].size()) > options_.max_text_bytes) {
      return finish(absl::InvalidArgumentError(absl::StrCat("inputs[", i, "]: ", texts[i].size(),
                                                            " bytes, more than --max-text-bytes (",
                                                            options_.max_text_bytes, ")")));
    }
  }
  EncodeOptions encode;
  encode.max_length = 0;  // no limit: tokenize shows the whole text
  encode.return_pieces = true;
  std::vector<Encoding> out;
  out.reserve(texts.size());
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < texts.size(); ++i) {
    auto encoding = m.tokenizer->Encode(texts[i], encode);
    if (!encoding.ok()) {
      return finish(absl::InvalidArgumentError(absl::StrCat("inputs[", i, "]: ", encoding.status().message())));
    }
    out.push_back(*std::move(encoding));
  }
  m.metrics->OnTokenization(absl::Now() - start);
  ticket.Release();
  (void)finish(absl::OkStatus());  // counts the call; the status is OK
  return out;
}

absl::StatusOr<v1::ListModelsResponse> RequestPath::ListModels(const CallInfo& call) {
  if (absl::Status s = CheckCaller(call); !s.ok()) {
    Refuse(call, "list_models", s);
    return s;
  }
  v1::ListModelsResponse response;
  for (const auto& m : registry_->models()) {
    v1::ModelInfo* info = response.add_models();
    info->set_name(m->name);
    info->set_task(TaskName(m->task));
    for (const auto& label : m->labels) info->add_labels(label);
    info->set_version(m->version);
    info->set_max_length(static_cast<uint32_t>(m->max_length));
    info->set_dtype(m->model->dtype());
    info->set_requested_dtype(m->requested_dtype);
    info->set_device(m->model->device());
    const ModelConfig& config = m->model->config();
    info->set_model_type(config.model_type);
    if (!config.architectures.empty()) info->set_architecture(config.architectures.front());
  }
  metrics_->OnUnroutedRequest("list_models", "OK", call.protocol);
  return response;
}

}  // namespace dserve
