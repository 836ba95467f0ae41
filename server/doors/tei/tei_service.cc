#include "server/doors/tei/tei_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/tokenizer/utf8.h"
#include "server/doors/grpc/grpc_call.h"
#include "server/doors/http/http_json.h"
#include "server/model_registry.h"
#include "tei/tei.grpc.pb.h"

#ifndef DSERVE_VERSION
#define DSERVE_VERSION "dev"
#endif

namespace dserve {
namespace {

namespace tei = ::tei::v1;

// Requests of one stream in flight at once (TEI's max_parallel_stream_requests).
constexpr size_t kStreamWindow = 64;

template <typename Response>
using Done = std::function<void(const absl::Status&, std::unique_ptr<Response>)>;

uint32_t CodePoints(absl::string_view text) {
  uint32_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

v1::TruncationDirection Direction(tei::TruncationDirection d) {
  return d == tei::TRUNCATION_DIRECTION_LEFT ? v1::TRUNCATION_DIRECTION_LEFT : v1::TRUNCATION_DIRECTION_RIGHT;
}

// TEI's `truncate`: true cuts what does not fit, false refuses it.
v1::Truncation TruncationOf(bool truncate) {
  return truncate ? v1::TRUNCATION_LONGEST_FIRST : v1::TRUNCATION_NONE;
}

template <typename V1Response>
void FillMetadata(const V1Response& r, uint32_t chars, tei::Metadata* m) {
  m->set_compute_chars(chars);
  m->set_compute_tokens(static_cast<uint32_t>(r.usage().tokens()));
  m->set_total_time_ns(r.timing().total_us() * 1000);
  m->set_queue_time_ns(r.timing().queue_us() * 1000);
  m->set_inference_time_ns(r.timing().inference_us() * 1000);
}

// ---------------------------------------------------------------- unary --

// A unary call's reactor (PathCallReactor: finishes once both the start
// returned and the completion ran).
template <typename Response>
class UnaryReactor final : public PathCallReactor {
 public:
  UnaryReactor(grpc::CallbackServerContext* ctx, Response* out) : ctx_(ctx), out_(out) {}

  Done<Response> Completion() {
    return [this](const absl::Status& status, std::unique_ptr<Response> response) {
      if (response != nullptr) *out_ = std::move(*response);
      Completed(status);
    };
  }
  void SetModelVersion(const std::string& version) { ctx_->AddInitialMetadata(kModelVersionKey, version); }

 private:
  grpc::CallbackServerContext* ctx_;
  Response* out_;
};

// ----------------------------------------------------------- bidi stream --

// A bidirectional stream: each request is started as it is read (at most
// kStreamWindow in flight), responses are written in request order, and the
// first error finishes the stream with its status once nothing it started
// is still running (their completions hold `this`).
//
// Lifetime: gRPC deletes the reactor (OnDone) after Finish once no reaction
// runs. Other threads (the calls' completions) touch it only while they are
// counted in in_flight_, and a thread that starts a read only while it is
// counted in read_starting_; Finish waits for both, so it is always the last
// use of `this` by the thread that calls it.
template <typename Request, typename Response>
class StreamReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  // Starts one request; `done` runs exactly once (maybe inline).
  using Start = std::function<std::shared_ptr<CallHandle>(const Request&, Done<Response>)>;

  explicit StreamReactor(Start start) : start_(std::move(start)) {
    reading_ = true;
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    Request request;
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (ok && error_.ok()) {
        request = std::move(request_);
        slot = std::make_shared<Slot>();
        slots_.push_back(slot);
        ++in_flight_;
      } else {
        read_done_ = true;
      }
    }
    if (slot != nullptr) {
      auto handle = start_(request, [this, slot](const absl::Status& status, std::unique_ptr<Response> response) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          slot->status = status;
          slot->response = std::move(response);
          slot->done = true;
        }
        Progress(Event::kCallDone);
      });
      bool cancel = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!slot->done) slot->handle = handle;
        cancel = !error_.ok();
      }
      if (cancel && handle != nullptr) handle->Cancel();
    }
    Progress(Event::kNone);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok && error_.ok()) error_ = absl::CancelledError("the client closed the stream");
    }
    Progress(Event::kNone);
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = absl::CancelledError("the client cancelled the stream");
    }
    Progress(Event::kNone);
  }

  void OnDone() override { delete this; }

 private:
  struct Slot {
    bool done = false;
    absl::Status status;
    std::unique_ptr<Response> response;
    std::shared_ptr<CallHandle> handle;
    bool cancelled = false;
  };
  enum class Event { kNone, kCallDone, kReadStarted };

  // Accounts for `event`, decides the next gRPC operations under the lock
  // and runs them after it.
  void Progress(Event event) {
    bool write = false, read = false, finish = false;
    absl::Status finish_status;
    std::vector<std::shared_ptr<CallHandle>> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (event == Event::kCallDone) --in_flight_;
      if (event == Event::kReadStarted) --read_starting_;
      if (finished_) return;
      if (error_.ok() && !writing_ && !slots_.empty() && slots_.front()->done) {
        std::shared_ptr<Slot> front = slots_.front();
        if (front->status.ok()) {
          response_ = std::move(*front->response);
          slots_.pop_front();
          writing_ = write = true;
        } else {
          error_ = front->status;
        }
      }
      if (!error_.ok()) {
        for (const auto& s : slots_) {
          if (!s->done && s->handle != nullptr && !s->cancelled) {
            s->cancelled = true;
            cancel.push_back(s->handle);
          }
        }
        if (in_flight_ == 0 && !writing_ && read_starting_ == 0) {
          finished_ = finish = true;
          finish_status = error_;
        }
      } else if (read_done_ && slots_.empty() && in_flight_ == 0 && !writing_ && read_starting_ == 0) {
        finished_ = finish = true;
      } else if (!read_done_ && !reading_ && slots_.size() < kStreamWindow) {
        reading_ = read = true;
        ++read_starting_;
      }
    }
    for (auto& h : cancel) h->Cancel();
    if (write) this->StartWrite(&response_);
    if (read) {
      this->StartRead(&request_);
      Progress(Event::kReadStarted);
    }
    if (finish) this->Finish(ToGrpc(finish_status));
  }

  const Start start_;
  Request request_;    // the read in progress
  Response response_;  // the write in progress
  std::mutex mu_;
  std::deque<std::shared_ptr<Slot>> slots_;  // started, not yet written, in request order
  int in_flight_ = 0;                        // started, completion not yet accounted
  int read_starting_ = 0;                    // threads between deciding a read and starting it
  bool reading_ = false, read_done_ = false, writing_ = false, finished_ = false;
  absl::Status error_;  // the stream's end status once not OK
};

// A call refused as a whole before anything is read.
template <typename Request, typename Response>
class RefusedBidi final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedBidi(const absl::Status& status) { this->Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

// ------------------------------------------------------------- the door --

}  // namespace

struct TeiServices::Impl {
  explicit Impl(RequestPath* path) : path(path) {}

  RequestPath* const path;

  // The call's identity and deadline; the request id goes back as a trailer.
  CallInfo Info(grpc::CallbackServerContext* ctx, bool add_trailer = true) const {
    return GrpcCallInfo(ctx, Protocol::kTeiGrpc, add_trailer);
  }

  // The model a call means (see the header); `task` "" = any.
  absl::StatusOr<std::string> Choose(const std::string& requested, absl::string_view task) const {
    std::vector<std::pair<std::string, std::string>> served;
    for (const auto& m : path->registry().models()) served.emplace_back(m->name, TaskName(m->task));
    auto chosen = ChooseModel(served, requested, path->options().http_default_model, task);
    if (chosen.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(
          absl::StrCat(chosen.status().message().substr(0, chosen.status().message().find(':')),
                       ": name one with the ", kTeiModelMetadata, " metadata (or start the server with "
                       "--http-default-model)"));
    }
    return chosen;
  }

  // Admit + choose: OK with the ticket and the model name, or the refusal
  // (already counted).
  absl::Status Enter(const CallInfo& info, const char* method, const std::string& requested, absl::string_view task,
                     PreprocessGate::Ticket* ticket, std::string* model) {
    if (absl::Status s = path->Admit(info, method, ticket); !s.ok()) return s;
    auto chosen = Choose(requested, task);
    if (!chosen.ok()) {
      path->Refuse(info, method, chosen.status());
      return chosen.status();
    }
    *model = *chosen;
    return absl::OkStatus();
  }

  // Predict / PredictPair: one v1 Classify.
  std::shared_ptr<CallHandle> StartPredict(const CallInfo& info, const std::string& requested,
                                           const std::vector<const std::string*>& inputs, bool truncate,
                                           bool raw_scores, tei::TruncationDirection direction,
                                           Done<tei::PredictResponse> done,
                                           std::function<void(const std::string&)> on_version = nullptr) {
    PreprocessGate::Ticket ticket;
    auto request = std::make_unique<v1::ClassifyRequest>();
    absl::Status s = Enter(info, "classify", requested, "classify", &ticket, request->mutable_model());
    if (s.ok() && (inputs.empty() || inputs.size() > 2)) {
      s = absl::InvalidArgumentError(
          absl::StrCat("inputs: ", inputs.size(), " texts; give one text or a pair of two"));
      path->Refuse(info, "classify", s);
    }
    if (!s.ok()) {
      done(s, nullptr);
      return nullptr;
    }
    request->add_texts(*inputs[0]);
    uint32_t chars = CodePoints(*inputs[0]);
    if (inputs.size() == 2) {
      request->add_text_pairs(*inputs[1]);
      chars += CodePoints(*inputs[1]);
    }
    request->set_raw_scores(raw_scores);
    request->set_truncation(TruncationOf(truncate));
    request->set_truncation_direction(Direction(direction));
    return path->Classify(info, std::move(request), std::move(ticket),
                          [done = std::move(done), chars, on_version](const absl::Status& status,
                                                                      std::unique_ptr<v1::ClassifyResponse> r) {
                            if (!status.ok()) return done(status, nullptr);
                            auto out = std::make_unique<tei::PredictResponse>();
                            if (r->results_size() > 0) {
                              for (const auto& l : r->results(0).labels()) {
                                tei::Prediction* p = out->add_predictions();
                                p->set_label(l.label());
                                p->set_score(l.score());
                              }
                            }
                            FillMetadata(*r, chars, out->mutable_metadata());
                            if (on_version) on_version(r->model_version());
                            done(absl::OkStatus(), std::move(out));
                          });
  }

  // One v1 Rerank of `texts` against `query`; ranks carry `indices[i]` for texts[i].
  std::shared_ptr<CallHandle> StartRerank(const CallInfo& info, const std::string& requested,
                                          const std::string& query, std::vector<std::string> texts,
                                          std::vector<uint32_t> indices, bool truncate, bool raw_scores,
                                          bool return_text, tei::TruncationDirection direction,
                                          Done<tei::RerankResponse> done,
                                          std::function<void(const std::string&)> on_version = nullptr) {
    PreprocessGate::Ticket ticket;
    auto request = std::make_unique<v1::RerankRequest>();
    if (absl::Status s = Enter(info, "rerank", requested, "rerank", &ticket, request->mutable_model()); !s.ok()) {
      done(s, nullptr);
      return nullptr;
    }
    uint32_t chars = 0;
    request->set_query(query);
    for (auto& t : texts) {
      chars += CodePoints(query) + CodePoints(t);
      request->add_documents(std::move(t));
    }
    request->set_raw_scores(raw_scores);
    request->set_return_documents(return_text);
    request->set_truncation(TruncationOf(truncate));
    request->set_truncation_direction(Direction(direction));
    return path->Rerank(info, std::move(request), std::move(ticket),
                        [done = std::move(done), chars, return_text, indices = std::move(indices), on_version](
                            const absl::Status& status, std::unique_ptr<v1::RerankResponse> r) {
                          if (!status.ok()) return done(status, nullptr);
                          auto out = std::make_unique<tei::RerankResponse>();
                          for (const auto& d : r->results()) {
                            tei::Rank* rank = out->add_ranks();
                            rank->set_index(d.index() < indices.size() ? indices[d.index()] : d.index());
                            rank->set_score(d.score());
                            if (return_text) rank->set_text(d.document());
                          }
                          FillMetadata(*r, chars, out->mutable_metadata());
                          if (on_version) on_version(r->model_version());
                          done(absl::OkStatus(), std::move(out));
                        });
  }

  // Tokenize: synchronous (RequestPath::Tokenize).
  absl::StatusOr<tei::EncodeResponse> Tokenize(const CallInfo& info, const std::string& requested,
                                               const tei::EncodeRequest& request) {
    PreprocessGate::Ticket ticket;
    std::string model;
    if (absl::Status s = Enter(info, "tokenize", requested, "", &ticket, &model); !s.ok()) return s;
    if (request.has_prompt_name()) {
      absl::Status s = absl::InvalidArgumentError(
          absl::StrCat("prompt_name: '", request.prompt_name(), "': dserve models have no prompts"));
      path->Refuse(info, "tokenize", s);
      return s;
    }
    auto encodings = path->Tokenize(info, model, {request.inputs()}, std::move(ticket));
    if (!encodings.ok()) return encodings.status();
    const Encoding& encoding = encodings->front();
    const std::string& text = request.inputs();
    tei::EncodeResponse out;
    for (size_t t = 0; t < encoding.size(); ++t) {
      const bool special = encoding.sequence_ids[t] < 0;
      if (special && !request.add_special_tokens()) continue;
      tei::SimpleToken* token = out.add_tokens();
      token->set_id(static_cast<uint32_t>(encoding.ids[t]));
      token->set_special(special);
      if (special) {
        token->set_text(t < encoding.pieces.size() ? encoding.pieces[t] : "");
      } else {
        const ByteSpan span = encoding.offsets[t];
        token->set_start(span.begin);
        token->set_stop(span.end);
        token->set_text(text.substr(span.begin, span.end - span.begin));
      }
    }
    return out;
  }

  // Decode: the pieces of `ids` joined, SentencePiece's word marks as spaces.
  absl::StatusOr<tei::DecodeResponse> Decode(const CallInfo& info, const std::string& requested,
                                             const tei::DecodeRequest& request) {
    auto refuse = [&](absl::Status s) {
      path->Refuse(info, "decode", s);
      return s;
    };
    if (absl::Status s = path->CheckCaller(info); !s.ok()) return refuse(s);
    auto name = Choose(requested, "");
    if (!name.ok()) return refuse(name.status());
    auto model = path->FindModel(*name);
    if (!model.ok()) return refuse(model.status());
    const Tokenizer& tok = *(*model)->tokenizer;
    const int specials[] = {tok.cls_id(), tok.sep_id(), tok.pad_id(), tok.mask_id(), tok.unk_id()};
    std::string text;
    for (int i = 0; i < request.ids_size(); ++i) {
      const uint32_t id = request.ids(i);
      if (id >= static_cast<uint32_t>(tok.vocab_size())) {
        return refuse(absl::InvalidArgumentError(
            absl::StrCat("ids[", i, "]: ", id, " is not a token id (vocabulary of ", tok.vocab_size(), ")")));
      }
      const bool special = std::find(std::begin(specials), std::end(specials), static_cast<int>(id)) !=
                           std::end(specials);
      if (special && request.skip_special_tokens()) continue;
      std::string piece = static_cast<int>(id) == tok.mask_id() && tok.IdToPiece(id).empty() ? "[MASK]"
                                                                                               : tok.IdToPiece(id);
      if (special) {
        if (!text.empty() && text.back() != ' ') text += ' ';
        text += piece;
        text += ' ';
        continue;
      }
      // "<0xNN>" byte-fallback pieces are bytes; U+2581 marks a word start.
      if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
        text += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
        continue;
      }
      for (size_t p = 0; p < piece.size();) {
        if (piece.compare(p, 3, "\xE2\x96\x81") == 0) {
          if (!text.empty() && text.back() != ' ') text += ' ';
          p += 3;
        } else {
          text += piece[p++];
        }
      }
    }
    const size_t begin = text.find_first_not_of(' ');
    const size_t end = text.find_last_not_of(' ');
    tei::DecodeResponse out;
    out.set_text(begin == std::string::npos ? "" : text.substr(begin, end - begin + 1));
    return out;
  }

  absl::StatusOr<tei::InfoResponse> ModelInfo(const CallInfo& info, const std::string& requested) {
    auto refuse = [&](absl::Status s) {
      path->Refuse(info, "info", s);
      return s;
    };
    if (absl::Status s = path->CheckCaller(info); !s.ok()) return refuse(s);
    auto name = Choose(requested, "");
    if (!name.ok()) return refuse(name.status());
    auto model = path->FindModel(*name);
    if (!model.ok()) return refuse(model.status());
    const ServedModel& m = **model;
    const ServeOptions& o = path->options();
    tei::InfoResponse out;
    switch (m.task) {
      case Task::kClassify: out.set_model_type(tei::MODEL_TYPE_CLASSIFIER); break;
      case Task::kRerank: out.set_model_type(tei::MODEL_TYPE_RERANKER); break;
      default:
        return refuse(absl::FailedPreconditionError(absl::StrCat(
            "model '", m.name, "' serves ", TaskName(m.task),
            ", which tei.v1 has no model type for (classifier and reranker models only)")));
    }
    out.set_version(DSERVE_VERSION);
    out.set_model_id(m.name);
    out.set_model_sha(m.version);
    out.set_model_dtype(m.model->dtype());
    out.set_max_concurrent_requests(static_cast<uint32_t>(PreprocessLimit(o)));
    out.set_max_input_length(static_cast<uint32_t>(m.max_length));
    out.set_max_batch_tokens(static_cast<uint32_t>(m.settings.max_batch_tokens));
    out.set_max_batch_requests(static_cast<uint32_t>(m.settings.max_batch_size));
    out.set_max_client_batch_size(static_cast<uint32_t>(
        m.task == Task::kRerank ? o.max_documents_per_request : o.max_texts_per_request));
    out.set_tokenization_workers(static_cast<uint32_t>(PreprocessLimit(o)));
    return out;
  }

  absl::Status NoEmbedding(const CallInfo& info, const char* method) {
    absl::Status s = path->CheckCaller(info);
    if (s.ok()) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "tei.v1.Embed/", method, ": dserve serves classifier, reranker and answer models, not embedding "
          "models; use tei.v1.Predict or tei.v1.Rerank"));
    }
    path->Refuse(info, "embed", s);
    return s;
  }
};

namespace {

using Impl = TeiServices::Impl;

// A synchronous stream step: answers inline.
template <typename Request, typename Response, typename Fn>
typename StreamReactor<Request, Response>::Start Inline(Fn fn) {
  return [fn](const Request& request, Done<Response> done) -> std::shared_ptr<CallHandle> {
    absl::StatusOr<Response> r = fn(request);
    if (r.ok()) {
      done(absl::OkStatus(), std::make_unique<Response>(*std::move(r)));
    } else {
      done(r.status(), nullptr);
    }
    return nullptr;
  };
}

std::vector<const std::string*> Inputs(const google::protobuf::RepeatedPtrField<std::string>& inputs) {
  std::vector<const std::string*> out;
  for (const auto& s : inputs) out.push_back(&s);
  return out;
}

class InfoService final : public tei::Info::CallbackService {
 public:
  explicit InfoService(Impl* impl) : impl_(impl) {}
  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* ctx, const tei::InfoRequest*,
                                 tei::InfoResponse* response) override {
    return Reply(ctx, impl_->ModelInfo(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata)), response);
  }

 private:
  Impl* impl_;
};

class EmbedService final : public tei::Embed::CallbackService {
 public:
  explicit EmbedService(Impl* impl) : impl_(impl) {}
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const tei::EmbedRequest*,
                                  tei::EmbedResponse*) override {
    return Refuse(ctx, "Embed");
  }
  grpc::ServerUnaryReactor* EmbedSparse(grpc::CallbackServerContext* ctx, const tei::EmbedSparseRequest*,
                                        tei::EmbedSparseResponse*) override {
    return Refuse(ctx, "EmbedSparse");
  }
  grpc::ServerUnaryReactor* EmbedAll(grpc::CallbackServerContext* ctx, const tei::EmbedAllRequest*,
                                     tei::EmbedAllResponse*) override {
    return Refuse(ctx, "EmbedAll");
  }
  grpc::ServerBidiReactor<tei::EmbedRequest, tei::EmbedResponse>* EmbedStream(
      grpc::CallbackServerContext* ctx) override {
    return new RefusedBidi<tei::EmbedRequest, tei::EmbedResponse>(impl_->NoEmbedding(impl_->Info(ctx), "EmbedStream"));
  }
  grpc::ServerBidiReactor<tei::EmbedSparseRequest, tei::EmbedSparseResponse>* EmbedSparseStream(
      grpc::CallbackServerContext* ctx) override {
    return new RefusedBidi<tei::EmbedSparseRequest, tei::EmbedSparseResponse>(
        impl_->NoEmbedding(impl_->Info(ctx), "EmbedSparseStream"));
  }
  grpc::ServerBidiReactor<tei::EmbedAllRequest, tei::EmbedAllResponse>* EmbedAllStream(
      grpc::CallbackServerContext* ctx) override {
    return new RefusedBidi<tei::EmbedAllRequest, tei::EmbedAllResponse>(
        impl_->NoEmbedding(impl_->Info(ctx), "EmbedAllStream"));
  }

 private:
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, const char* method) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(impl_->NoEmbedding(impl_->Info(ctx), method)));
    return reactor;
  }
  Impl* impl_;
};

class PredictService final : public tei::Predict::CallbackService {
 public:
  explicit PredictService(Impl* impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const tei::PredictRequest* request,
                                    tei::PredictResponse* response) override {
    auto* reactor = new UnaryReactor<tei::PredictResponse>(ctx, response);
    reactor->Started(impl_->StartPredict(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata), {&request->inputs()},
                                         request->truncate(), request->raw_scores(),
                                         request->truncation_direction(), reactor->Completion(),
                                         [reactor](const std::string& v) { reactor->SetModelVersion(v); }));
    return reactor;
  }
  grpc::ServerUnaryReactor* PredictPair(grpc::CallbackServerContext* ctx, const tei::PredictPairRequest* request,
                                        tei::PredictResponse* response) override {
    auto* reactor = new UnaryReactor<tei::PredictResponse>(ctx, response);
    reactor->Started(impl_->StartPredict(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata),
                                         Inputs(request->inputs()), request->truncate(), request->raw_scores(),
                                         request->truncation_direction(), reactor->Completion(),
                                         [reactor](const std::string& v) { reactor->SetModelVersion(v); }));
    return reactor;
  }
  grpc::ServerBidiReactor<tei::PredictRequest, tei::PredictResponse>* PredictStream(
      grpc::CallbackServerContext* ctx) override {
    const CallInfo base = impl_->Info(ctx);
    const std::string model = ClientMetadata(ctx, kTeiModelMetadata);
    Impl* impl = impl_;
    return new StreamReactor<tei::PredictRequest, tei::PredictResponse>(
        [impl, base, model](const tei::PredictRequest& r, Done<tei::PredictResponse> done) {
          CallInfo info = base;
          info.received = absl::Now();
          return impl->StartPredict(info, model, {&r.inputs()}, r.truncate(), r.raw_scores(),
                                    r.truncation_direction(), std::move(done));
        });
  }
  grpc::ServerBidiReactor<tei::PredictPairRequest, tei::PredictResponse>* PredictPairStream(
      grpc::CallbackServerContext* ctx) override {
    const CallInfo base = impl_->Info(ctx);
    const std::string model = ClientMetadata(ctx, kTeiModelMetadata);
    Impl* impl = impl_;
    return new StreamReactor<tei::PredictPairRequest, tei::PredictResponse>(
        [impl, base, model](const tei::PredictPairRequest& r, Done<tei::PredictResponse> done) {
          CallInfo info = base;
          info.received = absl::Now();
          return impl->StartPredict(info, model, Inputs(r.inputs()), r.truncate(), r.raw_scores(),
                                    r.truncation_direction(), std::move(done));
        });
  }

 private:
  Impl* impl_;
};

// RerankStream: collects the stream, then one v1 Rerank per distinct query
// (in order of first appearance), merged into one ranking.
class RerankStreamReactor final : public grpc::ServerReadReactor<tei::RerankStreamRequest> {
 public:
  RerankStreamReactor(Impl* impl, grpc::CallbackServerContext* ctx, tei::RerankResponse* response)
      : impl_(impl), info_(impl->Info(ctx)), model_(ClientMetadata(ctx, kTeiModelMetadata)), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      requests_.push_back(std::move(request_));
      StartRead(&request_);
      return;
    }
    Run();
  }

  void OnCancel() override {
    std::vector<std::shared_ptr<CallHandle>> handles;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      handles = handles_;
    }
    for (auto& h : handles) {
      if (h != nullptr) h->Cancel();
    }
  }
  void OnDone() override { delete this; }

 private:
  void Run() {
    info_.received = absl::Now();
    if (requests_.empty()) {
      absl::Status s = absl::InvalidArgumentError("texts: the stream sent no (query, text) message");
      impl_->path->Refuse(info_, "rerank", s);
      return Finish(ToGrpc(s));
    }
    // Groups by query, in order of first appearance.
    std::vector<std::string> queries;
    std::map<std::string, size_t> group_of;
    std::vector<std::vector<std::string>> texts;
    std::vector<std::vector<uint32_t>> indices;
    for (size_t i = 0; i < requests_.size(); ++i) {
      auto [it, added] = group_of.emplace(requests_[i].query(), queries.size());
      if (added) {
        queries.push_back(requests_[i].query());
        texts.emplace_back();
        indices.emplace_back();
      }
      texts[it->second].push_back(requests_[i].text());
      indices[it->second].push_back(static_cast<uint32_t>(i));
    }
    // The first message decides raw_scores and return_text (as TEI does).
    const tei::RerankStreamRequest& first = requests_.front();
    pending_.store(static_cast<int>(queries.size()) + 1);
    for (size_t g = 0; g < queries.size(); ++g) {
      auto handle = impl_->StartRerank(
          info_, model_, queries[g], std::move(texts[g]), std::move(indices[g]), first.truncate(),
          first.raw_scores(), first.return_text(), first.truncation_direction(),
          [this](const absl::Status& status, std::unique_ptr<tei::RerankResponse> r) { Merge(status, std::move(r)); });
      bool cancel = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        handles_.push_back(handle);
        cancel = cancelled_;
      }
      if (cancel && handle != nullptr) handle->Cancel();
    }
    Arrive();
  }

  void Merge(const absl::Status& status, std::unique_ptr<tei::RerankResponse> r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok()) {
        if (status_.ok()) status_ = status;
      } else {
        for (auto& rank : *r->mutable_ranks()) *response_->add_ranks() = std::move(rank);
        tei::Metadata* m = response_->mutable_metadata();
        const tei::Metadata& g = r->metadata();
        m->set_compute_chars(m->compute_chars() + g.compute_chars());
        m->set_compute_tokens(m->compute_tokens() + g.compute_tokens());
        m->set_total_time_ns(std::max(m->total_time_ns(), g.total_time_ns()));
        m->set_queue_time_ns(std::max(m->queue_time_ns(), g.queue_time_ns()));
        m->set_inference_time_ns(std::max(m->inference_time_ns(), g.inference_time_ns()));
      }
    }
    Arrive();
  }

  void Arrive() {
    if (pending_.fetch_sub(1) != 1) return;
    if (status_.ok()) {
      auto* ranks = response_->mutable_ranks();
      std::stable_sort(ranks->begin(), ranks->end(), [](const tei::Rank& a, const tei::Rank& b) {
        return a.score() != b.score() ? a.score() > b.score() : a.index() < b.index();
      });
    } else {
      response_->Clear();
    }
    Finish(ToGrpc(status_));
  }

  Impl* const impl_;
  CallInfo info_;
  const std::string model_;
  tei::RerankResponse* response_;
  tei::RerankStreamRequest request_;
  std::vector<tei::RerankStreamRequest> requests_;
  std::atomic<int> pending_{0};
  std::mutex mu_;
  absl::Status status_;
  std::vector<std::shared_ptr<CallHandle>> handles_;
  bool cancelled_ = false;
};

class RerankService final : public tei::Rerank::CallbackService {
 public:
  explicit RerankService(Impl* impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* ctx, const tei::RerankRequest* request,
                                   tei::RerankResponse* response) override {
    auto* reactor = new UnaryReactor<tei::RerankResponse>(ctx, response);
    std::vector<std::string> texts(request->texts().begin(), request->texts().end());
    std::vector<uint32_t> indices(texts.size());
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<uint32_t>(i);
    reactor->Started(impl_->StartRerank(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata), request->query(),
                                        std::move(texts), std::move(indices), request->truncate(),
                                        request->raw_scores(), request->return_text(),
                                        request->truncation_direction(), reactor->Completion(),
                                        [reactor](const std::string& v) { reactor->SetModelVersion(v); }));
    return reactor;
  }
  grpc::ServerReadReactor<tei::RerankStreamRequest>* RerankStream(grpc::CallbackServerContext* ctx,
                                                                  tei::RerankResponse* response) override {
    return new RerankStreamReactor(impl_, ctx, response);
  }

 private:
  Impl* impl_;
};

class TokenizeService final : public tei::Tokenize::CallbackService {
 public:
  explicit TokenizeService(Impl* impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx, const tei::EncodeRequest* request,
                                     tei::EncodeResponse* response) override {
    return Reply(ctx, impl_->Tokenize(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata), *request), response);
  }
  grpc::ServerUnaryReactor* Decode(grpc::CallbackServerContext* ctx, const tei::DecodeRequest* request,
                                   tei::DecodeResponse* response) override {
    return Reply(ctx, impl_->Decode(impl_->Info(ctx), ClientMetadata(ctx, kTeiModelMetadata), *request), response);
  }
  grpc::ServerBidiReactor<tei::EncodeRequest, tei::EncodeResponse>* TokenizeStream(
      grpc::CallbackServerContext* ctx) override {
    const CallInfo base = impl_->Info(ctx);
    const std::string model = ClientMetadata(ctx, kTeiModelMetadata);
    Impl* impl = impl_;
    return new StreamReactor<tei::EncodeRequest, tei::EncodeResponse>(
        Inline<tei::EncodeRequest, tei::EncodeResponse>([impl, base, model](const tei::EncodeRequest& r) {
          CallInfo info = base;
          info.received = absl::Now();
          return impl->Tokenize(info, model, r);
        }));
  }
  grpc::ServerBidiReactor<tei::DecodeRequest, tei::DecodeResponse>* DecodeStream(
      grpc::CallbackServerContext* ctx) override {
    const CallInfo base = impl_->Info(ctx);
    const std::string model = ClientMetadata(ctx, kTeiModelMetadata);
    Impl* impl = impl_;
    return new StreamReactor<tei::DecodeRequest, tei::DecodeResponse>(
        Inline<tei::DecodeRequest, tei::DecodeResponse>([impl, base, model](const tei::DecodeRequest& r) {
          CallInfo info = base;
          info.received = absl::Now();
          return impl->Decode(info, model, r);
        }));
  }

 private:
  Impl* impl_;
};

}  // namespace

// The five services, over one Impl.
struct TeiServices::Services {
  explicit Services(Impl* impl) : info(impl), embed(impl), predict(impl), rerank(impl), tokenize(impl) {}
  InfoService info;
  EmbedService embed;
  PredictService predict;
  RerankService rerank;
  TokenizeService tokenize;
};

TeiServices::TeiServices(RequestPath* path)
    : impl_(std::make_unique<Impl>(path)), services_(std::make_unique<Services>(impl_.get())) {}

TeiServices::~TeiServices() = default;

void TeiServices::Register(grpc::ServerBuilder* builder) {
  builder->RegisterService(&services_->info);
  builder->RegisterService(&services_->embed);
  builder->RegisterService(&services_->predict);
  builder->RegisterService(&services_->rerank);
  builder->RegisterService(&services_->tokenize);
}

std::vector<const char*> TeiServices::ServiceNames() {
  return {"tei.v1.Info", "tei.v1.Embed", "tei.v1.Predict", "tei.v1.Rerank", "tei.v1.Tokenize"};
}

}  // namespace dserve
