#include "server/service.h"

#include <sched.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include <grpcpp/support/byte_buffer.h>

#include "model/tokenizer/utf8.h"
#include "model/util/logging.h"
#include "model/decode/decode.h"
#include "server/request_validation.h"

namespace dserve {
namespace {

constexpr char kRequestIdKey[] = "x-request-id";
// The version of the model that computed a response (ServedModel::version).
constexpr char kModelVersionKey[] = "x-dserve-model-version";

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

std::string CodeName(const absl::Status& s) {
  std::string name = absl::StatusCodeToString(s.code());
  for (char& c : name) c = static_cast<char>(c == ' ' ? '_' : std::toupper(static_cast<unsigned char>(c)));
  return name;
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%016x", rng());
}

// The client's x-request-id when it is short and printable, else a new one.
std::string RequestId(grpc::CallbackServerContext* ctx) {
  auto it = ctx->client_metadata().find(kRequestIdKey);
  if (it != ctx->client_metadata().end() && !it->second.empty() && it->second.size() <= 64) {
    std::string id(it->second.data(), it->second.size());
    bool printable = true;
    for (char c : id) printable &= (c > 32 && c < 127);
    if (printable) return id;
  }
  return NewRequestId();
}

absl::Time Deadline(grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// Finishes a call that never reached a model.
grpc::ServerUnaryReactor* Reject(grpc::CallbackServerContext* ctx, Metrics* metrics, const char* method,
                                 const absl::Status& status) {
  const std::string id = RequestId(ctx);
  ctx->AddTrailingMetadata(kRequestIdKey, id);
  metrics->OnUnroutedRequest(method, CodeName(status));
  if (status.code() == absl::StatusCode::kInternal) {
    Logger("server")->error("request {}: {}: {}", id, method, status.ToString());
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Finishes a call for a served model that validation refused: counted under
// the model (dserve_requests_total{model,task,code}), not under model="".
grpc::ServerUnaryReactor* RejectForModel(grpc::CallbackServerContext* ctx, const ServedModel& model,
                                         absl::Time started, const absl::Status& status) {
  const std::string id = RequestId(ctx);
  ctx->AddTrailingMetadata(kRequestIdKey, id);
  model.metrics->OnRequest(CodeName(status), absl::Now() - started, 0);
  if (status.code() == absl::StatusCode::kInternal) {
    Logger("server")->error("request {}: model {}: {}", id, model.name, status.ToString());
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Parses a raw request (server/request_validation.h).
template <typename Request>
absl::StatusOr<std::unique_ptr<Request>> ParseRawRequest(const grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return absl::InvalidArgumentError("request: unreadable message");
  std::string bytes;
  bytes.reserve(buffer->Length());
  for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return ParseRequest<Request>(absl::string_view(bytes));
}

// What request validation needs of a served model.
ModelInputSpec InputSpec(const ServedModel& m) {
  ModelInputSpec spec;
  spec.tokenizer = m.tokenizer.get();
  spec.max_length = static_cast<int>(m.max_length);
  spec.doc_stride = m.model->config().dserve.qa.doc_stride;
  spec.type_ids = m.model->config().type_vocab_size > 0;
  return spec;
}

// ------------------------------------------------------------ ModelCall --

// The registry's snapshot of a model: a call holds the one it started
// with, so a hot reload never changes the model under it.
using ModelRef = std::shared_ptr<const ServedModel>;

// A call that runs items on a model. Owns the per-call state; deleted by
// gRPC (OnDone) after Finish. Finish happens exactly once: when Submit
// fails, or on the worker thread that completes the last item.
class ModelCall : public grpc::ServerUnaryReactor {
 public:
  ModelCall(grpc::CallbackServerContext* ctx, ModelRef model, grpc::ByteBuffer* response_buffer)
      : ctx_(ctx), model_(std::move(model)), response_buffer_(response_buffer), id_(RequestId(ctx)), started_(absl::Now()),
        cancelled_(std::make_shared<std::atomic<bool>>(false)) {
    ctx_->AddTrailingMetadata(kRequestIdKey, id_);
    // This snapshot's workers compute every item of the call, so its
    // version is the one that computed the response (issue 16, defect 7).
    ctx_->AddInitialMetadata(kModelVersionKey, model_->version);
  }

  void OnCancel() override {
    cancelled_->store(true, std::memory_order_release);
    model_->workers->Wake();
  }
  void OnDone() override { delete this; }

  // Queues one item per input; on rejection finishes the call with it.
  void Submit(std::vector<ItemInput> inputs) {
    const size_t n = inputs.size();
    outputs_.resize(n);
    remaining_.store(n);
    std::vector<ItemTask> tasks;
    tasks.reserve(n);
    const absl::Time deadline = Deadline(ctx_);
    for (size_t i = 0; i < n; ++i) {
      ItemTask task;
      task.num_tokens = static_cast<int64_t>(inputs[i].ids.size());
      tokens_ += task.num_tokens;
      task.deadline = deadline;
      task.cancelled = cancelled_;
      task.payload = std::move(inputs[i]);
      task.done = [this, i](absl::StatusOr<ItemOutput> out) { OnItemDone(i, std::move(out)); };
      tasks.push_back(std::move(task));
    }
    if (absl::Status s = model_->workers->Submit(std::move(tasks)); !s.ok()) End(s);
  }

 protected:
  // Builds the response from outputs_ once every item succeeded.
  virtual absl::Status Decode() = 0;
  // The response Decode() built; serialised into the raw reply.
  virtual const google::protobuf::Message& response() const = 0;

  void FillUsageAndTiming(v1::Usage* usage, v1::Timing* timing) const {
    usage->set_tokens(static_cast<uint64_t>(tokens_));
    usage->set_items(static_cast<uint32_t>(outputs_.size()));
    absl::Duration queue, inference;
    for (const auto& o : outputs_) {
      queue = std::max(queue, o.queue_wait);
      inference = std::max(inference, o.inference);
    }
    timing->set_total_us(static_cast<uint64_t>(absl::ToInt64Microseconds(absl::Now() - started_)));
    timing->set_queue_us(static_cast<uint64_t>(absl::ToInt64Microseconds(queue)));
    timing->set_inference_us(static_cast<uint64_t>(absl::ToInt64Microseconds(inference)));
  }

  const ServedModel& model() const { return *model_; }
  std::vector<ItemOutput> outputs_;

 private:
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
    absl::Status status = first_error_;
    if (status.ok()) {
      status = Decode();
      if (!status.ok()) status = absl::InternalError(absl::StrCat("decode: ", status.message()));
    }
    End(status);
  }

  void End(absl::Status status) {
    if (status.ok()) {
      bool own = false;
      grpc::Status s = grpc::SerializationTraits<google::protobuf::Message>::Serialize(response(), response_buffer_, &own);
      if (!s.ok()) status = absl::InternalError(absl::StrCat("serialising the response: ", s.error_message()));
    }
    model_->metrics->OnRequest(CodeName(status), absl::Now() - started_, status.ok() ? tokens_ : 0);
    if (status.code() == absl::StatusCode::kInternal) {
      Logger("server")->error("request {}: model {}: {}", id_, model_->name, status.ToString());
    }
    Finish(ToGrpc(status));  // `this` may be deleted from here on
  }

  grpc::CallbackServerContext* ctx_;
  const ModelRef model_;
  grpc::ByteBuffer* response_buffer_;
  const std::string id_;
  const absl::Time started_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  int64_t tokens_ = 0;
  std::atomic<size_t> remaining_{0};
  std::mutex mu_;
  absl::Status first_error_;
};

class ClassifyCall final : public ModelCall {
 public:
  ClassifyCall(grpc::CallbackServerContext* ctx, ModelRef m, std::unique_ptr<v1::ClassifyRequest> request,
               grpc::ByteBuffer* response, std::vector<bool> truncated, std::vector<uint32_t> tokens)
      : ModelCall(ctx, std::move(m), response), request_(std::move(request)), truncated_(std::move(truncated)),
        tokens_(std::move(tokens)) {}

 private:
  absl::Status Decode() override {
    const ModelConfig& config = model().model->config();
    ClassifyDecodeOptions options;
    auto problem = ParseProblemType(config.problem_type);
    if (!problem.ok()) return problem.status();
    options.problem_type = *problem;
    options.temperature = config.dserve.temperature;
    options.top_k = request_->top_k();
    options.raw_scores = request_->raw_scores();
    for (size_t i = 0; i < outputs_.size(); ++i) {
      auto labels = DecodeClassification(outputs_[i].logits, model().labels, options);
      if (!labels.ok()) return labels.status();
      v1::Classification* result = response_.add_results();
      for (const ScoredLabel& l : *labels) {
        v1::LabelScore* ls = result->add_labels();
        ls->set_label(l.label);
        ls->set_score(l.score);
      }
      result->set_truncated(truncated_[i]);
      result->set_tokens(tokens_[i]);
    }
    response_.set_model(model().name);
    response_.set_model_version(model().version);
    FillUsageAndTiming(response_.mutable_usage(), response_.mutable_timing());
    return absl::OkStatus();
  }
  const google::protobuf::Message& response() const override { return response_; }

  std::unique_ptr<v1::ClassifyRequest> request_;
  v1::ClassifyResponse response_;
  std::vector<bool> truncated_;
  std::vector<uint32_t> tokens_;
};

class AnswerCall final : public ModelCall {
 public:
  AnswerCall(grpc::CallbackServerContext* ctx, ModelRef m, std::unique_ptr<v1::AnswerRequest> request,
             grpc::ByteBuffer* response, std::vector<Window> windows, std::vector<uint32_t> window_context)
      : ModelCall(ctx, std::move(m), response), request_(std::move(request)), windows_(std::move(windows)),
        window_context_(std::move(window_context)) {}

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
    std::vector<absl::string_view> contexts(request_->contexts().begin(), request_->contexts().end());
    QaDecodeOptions options;
    options.n_best = static_cast<uint32_t>(std::max(1, qa.n_best));
    options.max_answer_tokens = request_->max_answer_tokens() > 0 ? request_->max_answer_tokens()
                                                                  : static_cast<uint32_t>(qa.max_answer_tokens);
    options.max_answer_chars = request_->max_answer_chars();
    options.null_score_diff_threshold = request_->has_null_score_diff_threshold()
                                            ? request_->null_score_diff_threshold()
                                            : static_cast<float>(qa.null_score_diff_threshold);
    options.top_k = std::max<uint32_t>(1, request_->top_k());
    auto result = DecodeAnswer(windows, contexts, options);
    if (!result.ok()) return result.status();
    for (const QaAnswer& a : result->answers) {
      v1::Answer* answer = response_.add_answers();
      answer->set_text(a.text);
      answer->set_context_index(a.context_index);
      answer->set_start_char(a.start_char);
      answer->set_end_char(a.end_char);
      answer->set_score(a.score);
      answer->set_logit_score(a.logit_score);
    }
    response_.set_no_answer(result->no_answer);
    response_.set_no_answer_score(result->no_answer_score);
    response_.set_null_score_diff(result->null_score_diff);
    if (result->no_answer) model().metrics->OnNoAnswer();
    response_.set_model(model().name);
    response_.set_model_version(model().version);
    FillUsageAndTiming(response_.mutable_usage(), response_.mutable_timing());
    return absl::OkStatus();
  }
  const google::protobuf::Message& response() const override { return response_; }

  std::unique_ptr<v1::AnswerRequest> request_;
  v1::AnswerResponse response_;
  std::vector<Window> windows_;
  std::vector<uint32_t> window_context_;
};

class RerankCall final : public ModelCall {
 public:
  RerankCall(grpc::CallbackServerContext* ctx, ModelRef m, std::unique_ptr<v1::RerankRequest> request,
             grpc::ByteBuffer* response, std::vector<uint32_t> chunk_document, std::vector<ByteSpan> chunk_bytes)
      : ModelCall(ctx, std::move(m), response), request_(std::move(request)), chunk_document_(std::move(chunk_document)),
        chunk_bytes_(std::move(chunk_bytes)) {}

 private:
  absl::Status Decode() override {
    const int documents = request_->documents_size();
    std::vector<std::vector<float>> logits(documents);
    std::vector<std::vector<size_t>> chunk_items(documents);
    for (size_t i = 0; i < outputs_.size(); ++i) {
      logits[chunk_document_[i]].push_back(outputs_[i].logits.at(0));
      chunk_items[chunk_document_[i]].push_back(i);
    }
    RerankDecodeOptions options;
    options.top_n = request_->top_n();
    options.raw_scores = request_->raw_scores();
    options.temperature = model().model->config().dserve.temperature;
    auto ranked = DecodeRerank(logits, options);
    if (!ranked.ok()) return ranked.status();
    for (const RankedResult& r : *ranked) {
      v1::RankedDocument* doc = response_.add_results();
      doc->set_index(r.index);
      doc->set_score(r.score);
      const std::string& text = request_->documents(static_cast<int>(r.index));
      if (request_->return_documents()) doc->set_document(text);
      const ByteSpan bytes = chunk_bytes_[chunk_items[r.index][r.best_chunk]];
      const CodepointSpan chars = CodepointTable(text).ToCodepoints(bytes);
      doc->set_chunk_start_char(chars.begin);
      doc->set_chunk_end_char(chars.end);
    }
    response_.set_model(model().name);
    response_.set_model_version(model().version);
    FillUsageAndTiming(response_.mutable_usage(), response_.mutable_timing());
    return absl::OkStatus();
  }
  const google::protobuf::Message& response() const override { return response_; }

  std::unique_ptr<v1::RerankRequest> request_;
  v1::RerankResponse response_;
  std::vector<uint32_t> chunk_document_;
  std::vector<ByteSpan> chunk_bytes_;
};

}  // namespace

// ------------------------------------------------------------ Admission --

struct InferenceService::Admission {
  // Auth and draining, before anything of the request is read.
  static absl::Status CheckCaller(const InferenceService& s, grpc::CallbackServerContext* ctx) {
    if (s.auth_) {
      auto it = ctx->client_metadata().find("authorization");
      const bool ok = it != ctx->client_metadata().end() &&
                      s.auth_->Check(absl::string_view(it->second.data(), it->second.size()));
      if (!ok) return absl::UnauthenticatedError("missing or wrong bearer token (authorization: Bearer TOKEN)");
    }
    if (s.draining()) return absl::UnavailableError("server is draining; retry on another replica");
    return absl::OkStatus();
  }

  // The model called `name`, which must serve `task`.
  static absl::StatusOr<ModelRef> FindModel(const InferenceService& s, const std::string& name, Task task) {
    if (name.empty()) return absl::InvalidArgumentError("model: required");
    ModelRef m = s.registry_->Find(name);
    if (m == nullptr) {
      std::vector<std::string> names;
      for (const auto& served : s.registry_->models()) names.push_back(served->name);
      return absl::NotFoundError(
          absl::StrCat("model '", name, "' is not served (models: ", absl::StrJoin(names, ", "), ")"));
    }
    if (m->task != task) {
      return absl::FailedPreconditionError(absl::StrCat("model '", name, "' serves ", TaskName(m->task),
                                                        ", not ", TaskName(task)));
    }
    return m;
  }

  // CheckCaller, a deadline already past, a slot of the pre-processing gate
  // (held in `ticket` until the request is tokenized), parse, FindModel:
  // the common start of the model RPCs, cheapest first.
  template <typename Request>
  static absl::Status Admit(InferenceService& s, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                            Task task, std::unique_ptr<Request>* request, ModelRef* model,
                            PreprocessGate::Ticket* ticket) {
    if (absl::Status st = CheckCaller(s, ctx); !st.ok()) return st;
    if (Deadline(ctx) <= absl::Now()) return absl::DeadlineExceededError("deadline passed before the request was read");
    *ticket = s.preprocess_gate_.TryEnter();
    if (!*ticket) {
      return absl::ResourceExhaustedError(absl::StrCat("server busy: ", s.preprocess_gate_.limit(),
                                                       " requests are being parsed and tokenized "
                                                       "(--max-concurrent-preprocess); retry with backoff"));
    }
    auto parsed = ParseRawRequest<Request>(raw);
    if (!parsed.ok()) return parsed.status();
    *request = *std::move(parsed);
    auto m = FindModel(s, (*request)->model(), task);
    if (!m.ok()) return m.status();
    *model = *std::move(m);
    return absl::OkStatus();
  }

  // After parsing, before tokenizing: the request's limits (`limits`, from
  // Check*Limits), then whether the model's queue would take it now (full,
  // shutting down, deadline passed), so a request the queue would refuse is
  // refused before its texts are tokenized.
  // `items`: the request's items when known before tokenizing (Classify:
  // one per text), else -1; more than the queue can ever hold is
  // INVALID_ARGUMENT (as the queue would say), whether or not it is full now.
  static absl::Status BeforeTokenizing(const InferenceService& s, const ServedModel& m,
                                       grpc::CallbackServerContext* ctx, const absl::Status& limits,
                                       int64_t items = -1) {
    if (!limits.ok()) return limits;
    if (items > s.options_.max_queue_items) {
      m.metrics->OnRejected(RejectReason::kInvalid, items);
      return absl::InvalidArgumentError(absl::StrCat("request needs ", items, " items, more than the queue of model '",
                                                     m.name, "' can ever hold (max_queue_items=",
                                                     s.options_.max_queue_items, "); split it into smaller requests"));
    }
    return m.workers->CheckAdmission(Deadline(ctx));
  }
};

int PreprocessLimit(const ServeOptions& options) {
  if (options.max_concurrent_preprocess > 0) return options.max_concurrent_preprocess;
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores < 1) cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(4, 2 * cores);
}

InferenceService::InferenceService(const ModelRegistry* registry, Metrics* metrics, const ServeOptions& options,
                                   std::optional<TokenAuth> auth)
    : registry_(registry), metrics_(metrics), options_(options), auth_(std::move(auth)),
      preprocess_gate_(PreprocessLimit(options), [metrics](int n) { metrics->SetPreprocessing(n); }) {}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* response) {
  const absl::Time started = absl::Now();
  ModelRef m;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "classify", s); };
  std::unique_ptr<v1::ClassifyRequest> request;
  PreprocessGate::Ticket ticket;
  if (auto s = Admission::Admit<v1::ClassifyRequest>(*this, ctx, raw, Task::kClassify, &request, &m, &ticket); !s.ok()) {
    return reject(s);
  }
  if (auto s = Admission::BeforeTokenizing(*this, *m, ctx, CheckClassifyLimits(*request, options_),
                                            request->texts_size());
      !s.ok()) {
    return RejectForModel(ctx, *m, started, s);
  }
  auto prepared = PrepareClassify(*request, options_, InputSpec(*m));
  ticket.Release();
  if (!prepared.ok()) return RejectForModel(ctx, *m, started, prepared.status());
  auto* call = new ClassifyCall(ctx, m, std::move(request), response, std::move(prepared->truncated),
                                std::move(prepared->tokens));
  call->Submit(std::move(prepared->inputs));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Answer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  const absl::Time started = absl::Now();
  ModelRef m;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "answer", s); };
  std::unique_ptr<v1::AnswerRequest> request;
  PreprocessGate::Ticket ticket;
  if (auto s = Admission::Admit<v1::AnswerRequest>(*this, ctx, raw, Task::kAnswer, &request, &m, &ticket); !s.ok()) {
    return reject(s);
  }
  if (auto s = Admission::BeforeTokenizing(*this, *m, ctx, CheckAnswerLimits(*request, options_)); !s.ok()) {
    return RejectForModel(ctx, *m, started, s);
  }
  auto prepared = PrepareAnswer(*request, options_, InputSpec(*m));
  ticket.Release();
  if (!prepared.ok()) return RejectForModel(ctx, *m, started, prepared.status());
  auto* call = new AnswerCall(ctx, m, std::move(request), response, std::move(prepared->windows),
                              std::move(prepared->window_context));
  call->Submit(std::move(prepared->inputs));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Rerank(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  const absl::Time started = absl::Now();
  ModelRef m;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "rerank", s); };
  std::unique_ptr<v1::RerankRequest> request;
  PreprocessGate::Ticket ticket;
  if (auto s = Admission::Admit<v1::RerankRequest>(*this, ctx, raw, Task::kRerank, &request, &m, &ticket); !s.ok()) {
    return reject(s);
  }
  if (auto s = Admission::BeforeTokenizing(*this, *m, ctx, CheckRerankLimits(*request, options_)); !s.ok()) {
    return RejectForModel(ctx, *m, started, s);
  }
  auto prepared = PrepareRerank(*request, options_, InputSpec(*m));
  ticket.Release();
  if (!prepared.ok()) return RejectForModel(ctx, *m, started, prepared.status());
  auto* call = new RerankCall(ctx, m, std::move(request), response, std::move(prepared->chunk_document),
                              std::move(prepared->chunk_bytes));
  call->Submit(std::move(prepared->inputs));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* ctx,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  if (auto s = Admission::CheckCaller(*this, ctx); !s.ok()) {
    return Reject(ctx, metrics_, "list_models", s);
  }
  for (const auto& m : registry_->models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m->name);
    info->set_task(TaskName(m->task));
    for (const auto& label : m->labels) info->add_labels(label);
    info->set_version(m->version);
    info->set_max_length(static_cast<uint32_t>(m->max_length));
    info->set_dtype(m->model->dtype());
    info->set_device(m->model->device());
    const ModelConfig& config = m->model->config();
    info->set_model_type(config.model_type);
    if (!config.architectures.empty()) info->set_architecture(config.architectures.front());
  }
  ctx->AddTrailingMetadata(kRequestIdKey, RequestId(ctx));
  metrics_->OnUnroutedRequest("list_models", "OK");
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace dserve
