#include "server/doors/http/http_routes.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/checkpoint/model_config.h"
#include "server/doors/http/embedded_assets.h"
#include "server/doors/http/http_json.h"
#include "server/net/http_server.h"
#include "server/model_registry.h"
#include "server/request_path.h"

#ifndef DSERVE_VERSION
#define DSERVE_VERSION "dev"
#endif

namespace dserve {

absl::string_view OpenApiJson() { return {kEmbeddedOpenApiJson, kEmbeddedOpenApiJsonSize}; }
absl::string_view TryItPageHtml() { return {kEmbeddedIndexHtml, kEmbeddedIndexHtmlSize}; }

namespace {

constexpr char kRequestIdHeader[] = "x-request-id";
constexpr char kModelVersionHeader[] = "x-dserve-model-version";

// One call's result, handed from the completion thread to the handler's.
template <typename Response>
struct Result {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::unique_ptr<Response> response ABSL_GUARDED_BY(mu);
};

template <typename Response>
absl::StatusOr<std::unique_ptr<Response>> Wait(const std::shared_ptr<Result<Response>>& result) {
  absl::MutexLock lock(&result->mu);
  result->mu.Await(absl::Condition(&result->done));
  if (!result->status.ok()) return result->status;
  return std::move(result->response);
}

template <typename Response>
Completion<Response> Deliver(std::shared_ptr<Result<Response>> result) {
  return [result](const absl::Status& status, std::unique_ptr<Response> response) {
    absl::MutexLock lock(&result->mu);
    result->status = status;
    result->response = std::move(response);
    result->done = true;
  };
}

class Routes {
 public:
  explicit Routes(RequestPath* path) : path_(path) {}

  void Register(HttpServer* server, const std::shared_ptr<Routes>& self) {
    auto bind = [self](void (Routes::*method)(const HttpRequest&, HttpResponse*)) {
      return [self, method](const HttpRequest& req, HttpResponse* res) { ((*self).*method)(req, res); };
    };
    server->Handle("POST", "/predict", bind(&Routes::TeiPredictRoute));
    server->Handle("POST", "/rerank", bind(&Routes::TeiRerankRoute));
    server->Handle("POST", "/tokenize", bind(&Routes::TeiTokenizeRoute));
    server->Handle("GET", "/info", bind(&Routes::InfoRoute));
    server->Handle("GET", "/health", bind(&Routes::HealthRoute));
    server->Handle("POST", "/v1/rerank", bind(&Routes::CohereRerankRoute));
    server->Handle("POST", "/v1/answer", bind(&Routes::HfAnswerRoute));
    server->Handle("POST", "/v1/classify", bind(&Routes::ProtoClassifyRoute));
    server->Handle("GET", "/v1/models", bind(&Routes::ModelsRoute));
    server->Handle("POST", "/dserve.v1.Inference/Classify", bind(&Routes::ProtoClassifyRoute));
    server->Handle("POST", "/dserve.v1.Inference/Answer", bind(&Routes::ProtoAnswerRoute));
    server->Handle("POST", "/dserve.v1.Inference/Rerank", bind(&Routes::ProtoRerankRoute));
    server->Handle("POST", "/dserve.v1.Inference/ListModels", bind(&Routes::ModelsRoute));
    server->Handle("GET", "/openapi.json", [](const HttpRequest&, HttpResponse* res) {
      res->body = std::string(OpenApiJson());
    });
    server->Handle("GET", "/", [](const HttpRequest&, HttpResponse* res) {
      res->content_type = "text/html; charset=utf-8";
      res->body = std::string(TryItPageHtml());
    });
    server->SetFallback(bind(&Routes::UnknownRoute));
  }

 private:
  static void SendError(const absl::Status& status, int http_status, HttpResponse* res) {
    res->status = http_status;
    res->content_type = "application/json";
    res->body = HttpErrorBody(status.message(), HttpErrorType(http_status));
    if (http_status == 429 || http_status == 503) res->headers.emplace_back("Retry-After", "1");
    if (http_status == 401) res->headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  // A status from the request path (already counted there).
  static void SendStatus(const absl::Status& status, HttpResponse* res) {
    SendError(status, HttpStatusFor(status.code()), res);
  }
  // A body this adapter could not read: 400, counted as the path's refusal.
  void SendParseError(const CallInfo& call, const char* method, const absl::Status& status, HttpResponse* res) {
    path_->Refuse(call, method, status);
    SendError(status, 400, res);
  }

  // The call's identity and deadline from the headers; a bad
  // request-timeout is a parse error.
  absl::Status ReadCall(const HttpRequest& req, const char* method, CallInfo* call, HttpResponse* res) {
    absl::Status status = ReadHttpCall(req, Protocol::kHttp, call, res);
    if (!status.ok()) SendParseError(*call, method, status, res);
    return status;
  }

  static void Apply(const CallOptions& options, CallInfo* call) {
    if (options.timeout) call->deadline = std::min(call->deadline, call->received + *options.timeout);
    if (options.priority) call->priority = options.priority;
  }

  absl::StatusOr<std::string> Choose(const HttpRequest& req, absl::string_view task) {
    std::vector<std::pair<std::string, std::string>> served;
    for (const auto& m : path_->registry().models()) served.emplace_back(m->name, TaskName(m->task));
    return ChooseModel(served, req.param("model"), path_->options().http_default_model, task);
  }

  // Admit, parse (ParseFn: body -> StatusOr<Parsed>), run, reply (ReplyFn:
  // (Parsed&, Response&) -> body). RunFn is the RequestPath method.
  template <typename Request, typename Response, typename Parsed, typename ParseFn, typename RequestOf,
            typename ReplyFn>
  void Serve(const HttpRequest& req, HttpResponse* res, const char* method, absl::string_view tei_task,
             ParseFn parse, RequestOf request_of,
             std::shared_ptr<CallHandle> (RequestPath::*run)(const CallInfo&, std::unique_ptr<Request>,
                                                              PreprocessGate::Ticket, Completion<Response>),
             ReplyFn reply) {
    CallInfo call;
    if (!ReadCall(req, method, &call, res).ok()) return;
    PreprocessGate::Ticket ticket;
    if (absl::Status s = path_->Admit(call, method, &ticket); !s.ok()) return SendStatus(s, res);
    absl::StatusOr<Parsed> parsed = parse(req.body());
    if (!parsed.ok()) return SendParseError(call, method, parsed.status(), res);
    std::unique_ptr<Request>& request = request_of(*parsed);
    Apply(parsed->call, &call);
    if (request->has_priority()) call.priority = request->priority();
    if (!tei_task.empty()) {
      auto model = Choose(req, tei_task);
      if (!model.ok()) {
        path_->Refuse(call, method, model.status());
        return SendStatus(model.status(), res);
      }
      request->set_model(*model);
    }
    auto result = std::make_shared<Result<Response>>();
    (path_->*run)(call, std::move(request), std::move(ticket), Deliver(result));
    absl::StatusOr<std::unique_ptr<Response>> response = Wait(result);
    if (!response.ok()) return SendStatus(response.status(), res);
    res->headers.emplace_back(kModelVersionHeader, (*response)->model_version());
    res->body = reply(*parsed, **response, call);
  }

  void TeiPredictRoute(const HttpRequest& req, HttpResponse* res) {
    Serve<v1::ClassifyRequest, v1::ClassifyResponse, TeiPredict>(
        req, res, "classify", "classify", ParseTeiPredict, [](TeiPredict& p) -> auto& { return p.request; },
        &RequestPath::Classify,
        [](const TeiPredict& p, const v1::ClassifyResponse& r, const CallInfo&) {
          return TeiPredictResponse(r, p.batched);
        });
  }

  void TeiRerankRoute(const HttpRequest& req, HttpResponse* res) {
    Serve<v1::RerankRequest, v1::RerankResponse, TeiRerank>(
        req, res, "rerank", "rerank", ParseTeiRerank, [](TeiRerank& p) -> auto& { return p.request; },
        &RequestPath::Rerank,
        [](const TeiRerank& p, const v1::RerankResponse& r, const CallInfo&) {
          return TeiRerankResponse(r, p.return_text);
        });
  }

  void CohereRerankRoute(const HttpRequest& req, HttpResponse* res) {
    bool return_documents = false;
    Serve<v1::RerankRequest, v1::RerankResponse, CohereRerank>(
        req, res, "rerank", "",
        [&return_documents](absl::string_view body) {
          auto parsed = ParseCohereRerank(body);
          if (parsed.ok()) return_documents = parsed->request->return_documents();
          return parsed;
        },
        [](CohereRerank& p) -> auto& { return p.request; }, &RequestPath::Rerank,
        [&return_documents](const CohereRerank&, const v1::RerankResponse& r, const CallInfo& call) {
          return CohereRerankResponse(r, call.request_id, return_documents);
        });
  }

  void HfAnswerRoute(const HttpRequest& req, HttpResponse* res) {
    Serve<v1::AnswerRequest, v1::AnswerResponse, HfAnswer>(
        req, res, "answer", "", ParseHfAnswer, [](HfAnswer& p) -> auto& { return p.request; },
        &RequestPath::Answer,
        [](const HfAnswer& p, const v1::AnswerResponse& r, const CallInfo&) { return HfAnswerResponse(r, p); });
  }

  template <typename Request>
  struct ProtoCall {
    std::unique_ptr<Request> request = std::make_unique<Request>();
    CallOptions call;
  };
  template <typename Request>
  static absl::StatusOr<ProtoCall<Request>> ParseProto(absl::string_view body) {
    ProtoCall<Request> out;
    if (absl::Status s = ParseProtoJson(body, out.request.get(), &out.call); !s.ok()) return s;
    return out;
  }
  template <typename Request, typename Response>
  void ServeProto(const HttpRequest& req, HttpResponse* res, const char* method,
                  std::shared_ptr<CallHandle> (RequestPath::*run)(const CallInfo&, std::unique_ptr<Request>,
                                                                   PreprocessGate::Ticket, Completion<Response>)) {
    Serve<Request, Response, ProtoCall<Request>>(
        req, res, method, "", ParseProto<Request>, [](ProtoCall<Request>& p) -> auto& { return p.request; }, run,
        [](const ProtoCall<Request>&, const Response& r, const CallInfo&) { return ProtoJson(r); });
  }
  void ProtoClassifyRoute(const HttpRequest& req, HttpResponse* res) {
    ServeProto<v1::ClassifyRequest, v1::ClassifyResponse>(req, res, "classify", &RequestPath::Classify);
  }
  void ProtoAnswerRoute(const HttpRequest& req, HttpResponse* res) {
    ServeProto<v1::AnswerRequest, v1::AnswerResponse>(req, res, "answer", &RequestPath::Answer);
  }
  void ProtoRerankRoute(const HttpRequest& req, HttpResponse* res) {
    ServeProto<v1::RerankRequest, v1::RerankResponse>(req, res, "rerank", &RequestPath::Rerank);
  }

  void ModelsRoute(const HttpRequest& req, HttpResponse* res) {
    CallInfo call;
    if (!ReadCall(req, "list_models", &call, res).ok()) return;
    auto models = path_->ListModels(call);
    if (!models.ok()) return SendStatus(models.status(), res);
    res->body = ProtoJson(*models);
  }

  // No route matched: the server already wrote 404 (405: the path exists
  // for another method); counted as NOT_FOUND (UNIMPLEMENTED) under
  // dserve_requests_total{model="",task="unknown_route"}.
  void UnknownRoute(const HttpRequest& req, HttpResponse* res) {
    CallInfo call;
    call.protocol = Protocol::kHttp;
    call.request_id = RequestIdFor(req.header(kRequestIdHeader));
    call.authorization = req.header("authorization");
    res->headers.emplace_back(kRequestIdHeader, call.request_id);
    path_->Refuse(call, "unknown_route",
                  res->status == 405 ? absl::UnimplementedError(absl::StrCat(req.method(), " on ", req.path()))
                                     : absl::NotFoundError(absl::StrCat("no route ", req.method(), " ", req.path())));
  }

  void HealthRoute(const HttpRequest&, HttpResponse* res) {
    const bool serving = !path_->draining();
    res->status = serving ? 200 : 503;
    res->body = serving ? R"({"status":"serving"})" : R"({"status":"draining"})";
  }

  // TEI's /info for one model (?model=NAME, --http-default-model, or the
  // only one served).
  void InfoRoute(const HttpRequest& req, HttpResponse* res) {
    CallInfo call;
    if (!ReadCall(req, "info", &call, res).ok()) return;
    if (absl::Status s = path_->CheckCaller(call); !s.ok()) {
      path_->Refuse(call, "info", s);
      return SendStatus(s, res);
    }
    auto name = Choose(req, "");
    absl::StatusOr<std::shared_ptr<const ServedModel>> model =
        name.ok() ? path_->FindModel(*name) : absl::StatusOr<std::shared_ptr<const ServedModel>>(name.status());
    if (!model.ok()) {
      path_->Refuse(call, "info", model.status());
      return SendStatus(model.status(), res);
    }
    const ServedModel& m = **model;
    const ServeOptions& o = path_->options();
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (size_t i = 0; i < m.labels.size(); ++i) {
      id2label[std::to_string(i)] = m.labels[i];
      label2id[m.labels[i]] = i;
    }
    const std::string kind = m.task == Task::kClassify ? "classifier" : m.task == Task::kRerank ? "reranker" : "answer";
    nlohmann::json info = {
        {"model_id", m.name},
        {"model_sha", m.version},
        {"model_dtype", m.model->dtype()},
        {"model_type", {{kind, {{"id2label", id2label}, {"label2id", label2id}}}}},
        {"task", TaskName(m.task)},
        {"max_concurrent_requests", PreprocessLimit(o)},
        {"max_input_length", m.max_length},
        {"max_batch_tokens", m.settings.max_batch_tokens},
        {"max_batch_requests", m.settings.max_batch_size},
        {"max_client_batch_size", m.task == Task::kRerank ? o.max_documents_per_request : o.max_texts_per_request},
        {"version", DSERVE_VERSION}};
    res->body = info.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  // TEI's /tokenize with the chosen model's tokenizer (no truncation).
  // Limits, the model and the metrics are RequestPath::Tokenize's; the
  // pre-processing slot is held until the texts are tokenized.
  void TeiTokenizeRoute(const HttpRequest& req, HttpResponse* res) {
    CallInfo call;
    if (!ReadCall(req, "tokenize", &call, res).ok()) return;
    PreprocessGate::Ticket ticket;
    if (absl::Status s = path_->Admit(call, "tokenize", &ticket); !s.ok()) return SendStatus(s, res);
    auto parsed = ParseTeiTokenize(req.body());
    if (!parsed.ok()) return SendParseError(call, "tokenize", parsed.status(), res);
    auto name = Choose(req, "");
    if (!name.ok()) {
      path_->Refuse(call, "tokenize", name.status());
      return SendStatus(name.status(), res);
    }
    auto encodings = path_->Tokenize(call, *name, parsed->inputs, std::move(ticket));
    if (!encodings.ok()) return SendStatus(encodings.status(), res);
    std::vector<std::vector<TokenJson>> all;
    all.reserve(encodings->size());
    for (size_t i = 0; i < encodings->size(); ++i) {
      const std::string& text = parsed->inputs[i];
      const Encoding& encoding = (*encodings)[i];
      std::vector<TokenJson> tokens;
      for (size_t t = 0; t < encoding.size(); ++t) {
        const bool special = encoding.sequence_ids[t] < 0;
        if (special && !parsed->add_special_tokens) continue;
        TokenJson token;
        token.id = encoding.ids[t];
        token.special = special;
        if (special) {
          token.text = t < encoding.pieces.size() ? encoding.pieces[t] : "";
        } else {
          token.start = encoding.offsets[t].begin;
          token.stop = encoding.offsets[t].end;
          token.text = text.substr(token.start, token.stop - token.start);
        }
        tokens.push_back(std::move(token));
      }
      all.push_back(std::move(tokens));
    }
    res->body = TeiTokenizeResponse(all);
  }

  RequestPath* path_;
};

}  // namespace

absl::Status ReadHttpCall(const HttpRequest& req, Protocol protocol, CallInfo* call, HttpResponse* res) {
  call->protocol = protocol;
  call->received = absl::Now();
  call->request_id = RequestIdFor(req.header(kRequestIdHeader));
  call->authorization = req.header("authorization");
  res->headers.emplace_back(kRequestIdHeader, call->request_id);
  if (req.has_header("request-timeout")) {
    auto timeout = ParseRequestTimeout(req.header("request-timeout"));
    if (!timeout.ok()) return timeout.status();
    call->deadline = call->received + *timeout;
  }
  return absl::OkStatus();
}

void RegisterHttpRoutes(HttpServer* server, RequestPath* path) {
  // Every handler holds the routes, so they live as long as the server's
  // handlers do.
  auto routes = std::make_shared<Routes>(path);
  routes->Register(server, routes);
}

}  // namespace dserve
