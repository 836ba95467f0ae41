#include "server/service.h"

#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include <grpcpp/support/byte_buffer.h>

#include "model/tokenizer/utf8.h"
#include "model/util/logging.h"
#include "model/decode/decode.h"
#include "server/proto/raw_requests.pb.h"

namespace dserve {
namespace {

constexpr char kRequestIdKey[] = "x-request-id";

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

std::vector<int64_t> Widen(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

absl::StatusOr<Truncation> ToTruncation(v1::Truncation t, Truncation default_value) {
  switch (t) {
    case v1::TRUNCATION_UNSPECIFIED: return default_value;
    case v1::TRUNCATION_NONE: return Truncation::kNone;
    case v1::TRUNCATION_LONGEST_FIRST: return Truncation::kLongestFirst;
    case v1::TRUNCATION_ONLY_FIRST: return Truncation::kOnlyFirst;
    case v1::TRUNCATION_ONLY_SECOND: return Truncation::kOnlySecond;
    default:
      return absl::InvalidArgumentError(absl::StrCat("truncation: unknown value ", static_cast<int>(t)));
  }
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

absl::Status CheckText(absl::string_view field, const std::string& text, int64_t max_bytes) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty text"));
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", text.size(), " bytes exceed the limit of ", max_bytes,
                                                   " (--max-text-bytes)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(absl::string_view field, int64_t count, int64_t limit, absl::string_view flag) {
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat(field, ": at least one is required"));
  if (count > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", count, " items exceed the limit of ", limit, " (", flag, ")"));
  }
  return absl::OkStatus();
}

// Prefixes a tokenizer error with the field it came from.
absl::Status InField(absl::string_view field, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(field, ": ", s.message()));
}

// The first field of `raw` (a *Bytes mirror) that is not valid UTF-8, as
// INVALID_ARGUMENT naming the field, the index and the byte.
absl::Status FindInvalidUtf8(const google::protobuf::Message& raw) {
  const auto* descriptor = raw.GetDescriptor();
  const auto* reflection = raw.GetReflection();
  for (int f = 0; f < descriptor->field_count(); ++f) {
    const auto* field = descriptor->field(f);
    std::string scratch;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(raw, field); ++i) {
        const std::string& value = reflection->GetRepeatedStringReference(raw, field, i, &scratch);
        absl::Status s = ValidateUtf8(value, absl::StrCat(field->name(), "[", i, "]"));
        if (!s.ok()) return s;
      }
    } else {
      const std::string& value = reflection->GetStringReference(raw, field, &scratch);
      absl::Status s = ValidateUtf8(value, field->name());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Parses a raw request. A request protobuf rejects is parsed again as its
// bytes mirror to name the field holding invalid UTF-8.
template <typename Request, typename Mirror>
absl::StatusOr<std::unique_ptr<Request>> ParseRequest(const grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return absl::InvalidArgumentError("request: unreadable message");
  std::string bytes;
  bytes.reserve(buffer->Length());
  for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  auto request = std::make_unique<Request>();
  if (request->ParseFromString(bytes)) return request;
  Mirror mirror;
  if (mirror.ParseFromString(bytes)) {
    absl::Status s = FindInvalidUtf8(mirror);
    if (!s.ok()) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("request: not a valid ", Request::descriptor()->full_name()));
}

// ------------------------------------------------------------ ModelCall --

// A call that runs items on a model. Owns the per-call state; deleted by
// gRPC (OnDone) after Finish. Finish happens exactly once: when Submit
// fails, or on the worker thread that completes the last item.
class ModelCall : public grpc::ServerUnaryReactor {
 public:
  ModelCall(grpc::CallbackServerContext* ctx, const ServedModel* model, grpc::ByteBuffer* response_buffer)
      : ctx_(ctx), model_(model), response_buffer_(response_buffer), id_(RequestId(ctx)), started_(absl::Now()),
        cancelled_(std::make_shared<std::atomic<bool>>(false)) {
    ctx_->AddTrailingMetadata(kRequestIdKey, id_);
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
  const ServedModel* model_;
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
  ClassifyCall(grpc::CallbackServerContext* ctx, const ServedModel* m, std::unique_ptr<v1::ClassifyRequest> request,
               grpc::ByteBuffer* response, std::vector<bool> truncated, std::vector<uint32_t> tokens)
      : ModelCall(ctx, m, response), request_(std::move(request)), truncated_(std::move(truncated)),
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
  AnswerCall(grpc::CallbackServerContext* ctx, const ServedModel* m, std::unique_ptr<v1::AnswerRequest> request,
             grpc::ByteBuffer* response, std::vector<Window> windows, std::vector<uint32_t> window_context)
      : ModelCall(ctx, m, response), request_(std::move(request)), windows_(std::move(windows)),
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
  RerankCall(grpc::CallbackServerContext* ctx, const ServedModel* m, std::unique_ptr<v1::RerankRequest> request,
             grpc::ByteBuffer* response, std::vector<uint32_t> chunk_document, std::vector<ByteSpan> chunk_bytes)
      : ModelCall(ctx, m, response), request_(std::move(request)), chunk_document_(std::move(chunk_document)),
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
    FillUsageAndTiming(response_.mutable_usage(), response_.mutable_timing());
    return absl::OkStatus();
  }
  const google::protobuf::Message& response() const override { return response_; }

  std::unique_ptr<v1::RerankRequest> request_;
  v1::RerankResponse response_;
  std::vector<uint32_t> chunk_document_;
  std::vector<ByteSpan> chunk_bytes_;
};

// Byte range of the second text covered by a window's tokens.
ByteSpan SecondTextRange(const Window& w) {
  ByteSpan range{0, 0};
  bool first = true;
  for (const auto& off : w.second_offsets) {
    if (!off) continue;
    if (first) range.begin = off->begin;
    range.end = off->end;
    first = false;
  }
  return range;
}

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
  static absl::StatusOr<const ServedModel*> FindModel(const InferenceService& s, const std::string& name, Task task) {
    if (name.empty()) return absl::InvalidArgumentError("model: required");
    const ServedModel* m = s.registry_->Find(name);
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

  // CheckCaller, parse, FindModel: the common start of the model RPCs.
  template <typename Request, typename Mirror>
  static absl::Status Admit(const InferenceService& s, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                            Task task, std::unique_ptr<Request>* request, const ServedModel** model) {
    if (absl::Status st = CheckCaller(s, ctx); !st.ok()) return st;
    auto parsed = ParseRequest<Request, Mirror>(raw);
    if (!parsed.ok()) return parsed.status();
    *request = *std::move(parsed);
    auto m = FindModel(s, (*request)->model(), task);
    if (!m.ok()) return m.status();
    *model = *m;
    return absl::OkStatus();
  }
};

InferenceService::InferenceService(const ModelRegistry* registry, Metrics* metrics, const ServeOptions& options,
                                   std::optional<TokenAuth> auth)
    : registry_(registry), metrics_(metrics), options_(options), auth_(std::move(auth)) {}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* response) {
  const ServedModel* m = nullptr;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "classify", s); };
  std::unique_ptr<v1::ClassifyRequest> request;
  if (auto s = Admission::Admit<v1::ClassifyRequest, internal::ClassifyRequestBytes>(*this, ctx, raw, Task::kClassify, &request, &m);
      !s.ok()) {
    return reject(s);
  }
  if (auto s = CheckCount("texts", request->texts_size(), options_.max_texts_per_request, "--max-texts-per-request");
      !s.ok()) {
    return reject(s);
  }
  auto truncation = ToTruncation(request->truncation(), Truncation::kLongestFirst);
  if (!truncation.ok()) return reject(truncation.status());
  EncodeOptions encode;
  encode.max_length = static_cast<int>(m->max_length);
  encode.truncation = *truncation;
  std::vector<ItemInput> inputs;
  std::vector<bool> truncated;
  std::vector<uint32_t> tokens;
  inputs.reserve(request->texts_size());
  for (int i = 0; i < request->texts_size(); ++i) {
    const std::string field = absl::StrCat("texts[", i, "]");
    if (auto s = CheckText(field, request->texts(i), options_.max_text_bytes); !s.ok()) return reject(s);
    auto encoding = m->tokenizer->Encode(request->texts(i), encode);
    if (!encoding.ok()) return reject(InField(field, encoding.status()));
    // Truncated iff the last text token does not end the text.
    size_t last_end = 0;
    for (const auto& off : encoding->offsets) last_end = std::max<size_t>(last_end, off.end);
    truncated.push_back(encode.truncation != Truncation::kNone &&
                        request->texts(i).find_first_not_of(" \t\r\n", last_end) != std::string::npos);
    tokens.push_back(static_cast<uint32_t>(encoding->size()));
    inputs.push_back({Widen(encoding->ids), {}});
  }
  auto* call = new ClassifyCall(ctx, m, std::move(request), response, std::move(truncated), std::move(tokens));
  call->Submit(std::move(inputs));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Answer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  const ServedModel* m = nullptr;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "answer", s); };
  std::unique_ptr<v1::AnswerRequest> request;
  if (auto s = Admission::Admit<v1::AnswerRequest, internal::AnswerRequestBytes>(*this, ctx, raw, Task::kAnswer, &request, &m);
      !s.ok()) {
    return reject(s);
  }
  if (auto s = CheckText("question", request->question(), options_.max_text_bytes); !s.ok()) return reject(s);
  if (auto s = CheckCount("contexts", request->contexts_size(), options_.max_contexts_per_request,
                          "--max-contexts-per-request");
      !s.ok()) {
    return reject(s);
  }
  const int doc_stride = m->model->config().dserve.qa.doc_stride;
  const bool types = m->model->config().type_vocab_size > 0;
  std::vector<Window> windows;
  std::vector<uint32_t> window_context;
  std::vector<ItemInput> inputs;
  for (int c = 0; c < request->contexts_size(); ++c) {
    const std::string field = absl::StrCat("contexts[", c, "]");
    if (auto s = CheckText(field, request->contexts(c), options_.max_text_bytes); !s.ok()) return reject(s);
    auto ws = m->tokenizer->EncodeQuestionContextWindows(request->question(), request->contexts(c),
                                                         static_cast<int>(m->max_length), doc_stride,
                                                         /*clamp_stride=*/true);
    if (!ws.ok()) return reject(InField(field, ws.status()));
    for (Window& w : *ws) {
      inputs.push_back({Widen(w.ids), types ? Widen(w.type_ids) : std::vector<int64_t>()});
      window_context.push_back(static_cast<uint32_t>(c));
      windows.push_back(std::move(w));
    }
  }
  auto* call = new AnswerCall(ctx, m, std::move(request), response, std::move(windows), std::move(window_context));
  call->Submit(std::move(inputs));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Rerank(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* response) {
  const ServedModel* m = nullptr;
  auto reject = [&](const absl::Status& s) { return Reject(ctx, metrics_, "rerank", s); };
  std::unique_ptr<v1::RerankRequest> request;
  if (auto s = Admission::Admit<v1::RerankRequest, internal::RerankRequestBytes>(*this, ctx, raw, Task::kRerank, &request, &m);
      !s.ok()) {
    return reject(s);
  }
  if (auto s = CheckText("query", request->query(), options_.max_text_bytes); !s.ok()) return reject(s);
  if (auto s = CheckCount("documents", request->documents_size(), options_.max_documents_per_request,
                          "--max-documents-per-request");
      !s.ok()) {
    return reject(s);
  }
  auto truncation = ToTruncation(request->truncation(), Truncation::kNone);
  if (!truncation.ok()) return reject(truncation.status());
  // Unspecified: chunk long documents and keep the best chunk.
  const bool chunk = request->truncation() == v1::TRUNCATION_UNSPECIFIED;
  const bool types = m->model->config().type_vocab_size > 0;
  std::vector<uint32_t> chunk_document;
  std::vector<ByteSpan> chunk_bytes;
  std::vector<ItemInput> inputs;
  for (int d = 0; d < request->documents_size(); ++d) {
    const std::string field = absl::StrCat("documents[", d, "]");
    const std::string& doc = request->documents(d);
    if (auto s = CheckText(field, doc, options_.max_text_bytes); !s.ok()) return reject(s);
    if (chunk) {
      auto chunks = m->tokenizer->EncodeQueryDocumentChunks(request->query(), doc, static_cast<int>(m->max_length),
                                                            m->model->config().dserve.qa.doc_stride,
                                                            /*clamp_stride=*/true);
      if (!chunks.ok()) return reject(InField(field, chunks.status()));
      for (const Window& w : *chunks) {
        inputs.push_back({Widen(w.ids), types ? Widen(w.type_ids) : std::vector<int64_t>()});
        chunk_document.push_back(static_cast<uint32_t>(d));
        chunk_bytes.push_back(SecondTextRange(w));
      }
    } else {
      EncodeOptions encode;
      encode.max_length = static_cast<int>(m->max_length);
      encode.truncation = *truncation;
      auto enc = m->tokenizer->EncodePair(request->query(), doc, encode);
      if (!enc.ok()) return reject(InField(field, enc.status()));
      ByteSpan range{0, 0};
      for (size_t t = 0; t < enc->size(); ++t) {
        if (enc->sequence_ids[t] == 1) range.end = enc->offsets[t].end;
      }
      inputs.push_back({Widen(enc->ids), types ? Widen(enc->type_ids) : std::vector<int64_t>()});
      chunk_document.push_back(static_cast<uint32_t>(d));
      chunk_bytes.push_back(range);
    }
  }
  auto* call = new RerankCall(ctx, m, std::move(request), response, std::move(chunk_document), std::move(chunk_bytes));
  call->Submit(std::move(inputs));
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
  }
  ctx->AddTrailingMetadata(kRequestIdKey, RequestId(ctx));
  metrics_->OnUnroutedRequest("list_models", "OK");
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace dserve
