#include "server/doors/oip/oip_rest.h"

#include <google/protobuf/util/json_util.h>

#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/doors/oip/oip_calls.h"
#include "server/doors/http/http_json.h"
#include "server/doors/http/http_routes.h"
#include "server/net/http_server.h"

namespace dserve {
namespace oip {
namespace {

using json = nlohmann::json;

constexpr char kRequestIdHeader[] = "x-request-id";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
constexpr char kModelsPrefix[] = "/v2/models/";

// The OIP status of a path status: the protocol's 400 for a bad request
// (INVALID_ARGUMENT, FAILED_PRECONDITION), else the HTTP door's mapping.
int OipHttpStatus(absl::StatusCode code) {
  if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition) return 400;
  return HttpStatusFor(code);
}

void SendError(const absl::Status& status, HttpResponse* res) {
  res->status = OipHttpStatus(status.code());
  res->content_type = "application/json";
  res->body = json{{"error", std::string(status.message())}}.dump(-1, ' ', false, json::error_handler_t::replace);
  if (res->status == 429 || res->status == 503) res->headers.emplace_back("Retry-After", "1");
  if (res->status == 401) res->headers.emplace_back("WWW-Authenticate", "Bearer");
}

// Proto3 JSON prints 64-bit integers as strings; the OIP / Triton REST
// shapes have numbers.
void IntegersAsNumbers(json* j) {
  static const std::set<std::string> kIntegerKeys = {
      "shape", "dims", "count", "ns", "last_inference", "inference_count", "execution_count",
      "max_queue_delay_microseconds", "batch_size", "gpus"};
  if (j->is_array()) {
    for (auto& e : *j) IntegersAsNumbers(&e);
    return;
  }
  if (!j->is_object()) return;
  for (auto it = j->begin(); it != j->end(); ++it) {
    auto convert = [](json* v) {
      int64_t i = 0;
      uint64_t u = 0;
      if (!v->is_string()) return;
      if (absl::SimpleAtoi(v->get<std::string>(), &i)) {
        *v = i;
      } else if (absl::SimpleAtoi(v->get<std::string>(), &u)) {
        *v = u;
      }
    };
    if (kIntegerKeys.count(it.key())) {
      if (it->is_array()) {
        for (auto& e : *it) convert(&e);
      } else {
        convert(&*it);
      }
    }
    IntegersAsNumbers(&*it);
  }
}

std::string ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  json j = json::parse(out, nullptr, false);
  if (j.is_discarded()) return out;
  IntegersAsNumbers(&j);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status BadRequest(absl::string_view what) { return absl::InvalidArgumentError(what); }

// --- infer request --------------------------------------------------------

// An infer request read from the body: `holder` owns the typed contents and
// the parameters `input` points to; raw data points into the body.
struct RestInfer {
  inference::ModelInferRequest holder;
  InferInput input;
  bool binary_all = false;             // parameters.binary_data_output
  std::set<std::string> binary_outputs;  // outputs with parameters.binary_data(_output)
};

absl::Status ToParameter(const std::string& where, const json& v, inference::InferParameter* p) {
  if (v.is_boolean()) {
    p->set_bool_param(v.get<bool>());
  } else if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    p->set_uint64_param(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    p->set_int64_param(v.get<int64_t>());
  } else if (v.is_number_float()) {
    p->set_double_param(v.get<double>());
  } else if (v.is_string()) {
    p->set_string_param(v.get<std::string>());
  } else {
    return BadRequest(absl::StrCat(where, ": a parameter is a boolean, number or string"));
  }
  return absl::OkStatus();
}

absl::Status ReadParameters(const std::string& where, const json& j, Parameters* out) {
  if (!j.is_object()) return BadRequest(absl::StrCat(where, ": must be an object"));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (absl::Status s = ToParameter(absl::StrCat(where, ".", it.key()), *it, &(*out)[it.key()]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Flattens `data` (nested arrays, row-major) of a BYTES tensor into strings.
absl::Status FlattenBytes(const std::string& tensor, const json& data, inference::InferTensorContents* out) {
  if (data.is_array()) {
    for (const auto& e : data) {
      if (absl::Status s = FlattenBytes(tensor, e, out); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (!data.is_string()) {
    return BadRequest(absl::StrCat("input '", tensor, "': BYTES data elements must be strings, got ", data.type_name()));
  }
  // nlohmann keeps the bytes of the JSON string as sent (\u escapes decoded to
  // UTF-8); invalid UTF-8 is caught by the tensor contract.
  out->add_bytes_contents(data.get_ref<const std::string&>());
  return absl::OkStatus();
}

bool TrueParam(const json& params, const char* name) {
  if (!params.is_object()) return false;
  auto it = params.find(name);
  return it != params.end() && it->is_boolean() && it->get<bool>();
}

absl::StatusOr<std::unique_ptr<RestInfer>> ParseInfer(const HttpRequest& req, const std::string& model,
                                                      const std::string& version) {
  const std::string& body = req.body();
  size_t header_length = body.size();
  if (req.has_header(kHeaderLength)) {
    if (!absl::SimpleAtoi(req.header(kHeaderLength), &header_length) || header_length > body.size()) {
      return BadRequest(absl::StrCat(kHeaderLength, ": '", req.header(kHeaderLength),
                                     "' is not a length within the body's ", body.size(), " bytes"));
    }
  }
  const absl::string_view binary = absl::string_view(body).substr(header_length);
  json j = json::parse(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(header_length), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return BadRequest("request body: not a JSON object");
  auto out = std::make_unique<RestInfer>();
  out->input.model = model;
  out->input.version = version;
  if (auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return BadRequest("id: must be a string");
    out->input.id = id->get<std::string>();
  }
  if (auto params = j.find("parameters"); params != j.end()) {
    if (absl::Status s = ReadParameters("parameters", *params, out->holder.mutable_parameters()); !s.ok()) return s;
    out->binary_all = TrueParam(*params, "binary_data_output");
  }
  out->input.parameters = &out->holder.parameters();
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array()) return BadRequest("inputs: required, an array of tensors");
  size_t binary_used = 0;
  // Reserve: InputTensor::contents points into holder's inputs.
  out->holder.mutable_inputs()->Reserve(static_cast<int>(inputs->size()));
  for (size_t i = 0; i < inputs->size(); ++i) {
    const json& t = (*inputs)[i];
    const std::string where = absl::StrCat("inputs[", i, "]");
    if (!t.is_object()) return BadRequest(absl::StrCat(where, ": must be an object"));
    InputTensor tensor;
    auto name = t.find("name");
    auto datatype = t.find("datatype");
    auto shape = t.find("shape");
    if (name == t.end() || !name->is_string()) return BadRequest(absl::StrCat(where, ".name: required string"));
    tensor.name = name->get<std::string>();
    const std::string named = absl::StrCat("input '", tensor.name, "'");
    if (datatype == t.end() || !datatype->is_string()) return BadRequest(absl::StrCat(named, ": datatype required"));
    tensor.datatype = datatype->get<std::string>();
    if (shape == t.end() || !shape->is_array()) return BadRequest(absl::StrCat(named, ": shape required"));
    for (const auto& d : *shape) {
      if (!d.is_number_integer()) return BadRequest(absl::StrCat(named, ": shape must hold integers"));
      tensor.shape.push_back(d.get<int64_t>());
    }
    auto* holder = out->holder.add_inputs();
    auto params = t.find("parameters");
    if (params != t.end() && params->is_object() && params->contains("binary_data_size")) {
      const json& size = (*params)["binary_data_size"];
      if (!size.is_number_unsigned()) return BadRequest(absl::StrCat(named, ": binary_data_size must be a count"));
      const auto n = size.get<uint64_t>();
      if (n > binary.size() - binary_used) {
        return BadRequest(absl::StrCat(named, ": binary_data_size ", n, " but only ", binary.size() - binary_used,
                                       " bytes of binary data remain"));
      }
      if (t.contains("data")) return BadRequest(absl::StrCat(named, ": both data and binary_data_size"));
      tensor.raw = binary.substr(binary_used, n);
      binary_used += n;
    } else if (auto data = t.find("data"); data != t.end()) {
      if (tensor.datatype == "BYTES") {
        if (absl::Status s = FlattenBytes(tensor.name, *data, holder->mutable_contents()); !s.ok()) return s;
      }
      // Other datatypes: the contract refuses the datatype before the data.
      tensor.contents = &holder->contents();
    }
    out->input.inputs.push_back(std::move(tensor));
  }
  if (binary_used != binary.size()) {
    return BadRequest(absl::StrCat("binary data: ", binary.size(), " bytes after the JSON header, but the inputs' ",
                                   "binary_data_size add up to ", binary_used));
  }
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) return BadRequest("outputs: must be an array");
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& o = (*outputs)[i];
      auto name = o.is_object() ? o.find("name") : o.end();
      if (!o.is_object() || name == o.end() || !name->is_string()) {
        return BadRequest(absl::StrCat("outputs[", i, "].name: required string"));
      }
      out->input.outputs.push_back(name->get<std::string>());
      if (auto p = o.find("parameters"); p != o.end()) {
        if (TrueParam(*p, "binary_data") || TrueParam(*p, "binary_data_output")) {
          out->binary_outputs.insert(name->get<std::string>());
        }
      }
    }
  }
  return out;
}

// --- infer response -------------------------------------------------------

json DataOf(const inference::ModelInferResponse::InferOutputTensor& o) {
  const auto& c = o.contents();
  json data = json::array();
  for (const auto& v : c.bytes_contents()) data.push_back(v);
  for (float v : c.fp32_contents()) data.push_back(v);
  for (int64_t v : c.int64_contents()) data.push_back(v);
  for (bool v : c.bool_contents()) data.push_back(v);
  return data;
}

void WriteInferResponse(const RestInfer& request, const inference::ModelInferResponse& r, HttpResponse* res) {
  json j = {{"model_name", r.model_name()}, {"model_version", r.model_version()}};
  if (!r.id().empty()) j["id"] = r.id();
  json outputs = json::array();
  std::string binary;
  for (const auto& o : r.outputs()) {
    json t = {{"name", o.name()}, {"datatype", o.datatype()}, {"shape", json(std::vector<int64_t>(o.shape().begin(), o.shape().end()))}};
    if (request.binary_all || request.binary_outputs.count(o.name())) {
      const std::string raw = RawOutput(o);
      t["parameters"] = {{"binary_data_size", raw.size()}};
      binary += raw;
    } else {
      t["data"] = DataOf(o);
    }
    outputs.push_back(std::move(t));
  }
  j["outputs"] = std::move(outputs);
  std::string header = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (binary.empty() && !request.binary_all && request.binary_outputs.empty()) {
    res->content_type = "application/json";
    res->body = std::move(header);
    return;
  }
  res->headers.emplace_back(kHeaderLength, std::to_string(header.size()));
  res->content_type = "application/octet-stream";
  res->body = std::move(header) + binary;
}

// --- routes ---------------------------------------------------------------

// A /v2/models/... path: the model, version and action ("" = metadata).
struct ModelRoute {
  std::string model, version, action;
};

absl::StatusOr<ModelRoute> ParseModelRoute(const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path.substr(sizeof(kModelsPrefix) - 1), '/');
  ModelRoute route;
  if (parts.empty() || parts[0].empty()) return absl::NotFoundError(absl::StrCat("no route ", path));
  route.model = parts[0];
  size_t next = 1;
  if (parts.size() >= 3 && parts[1] == "versions" && !parts[2].empty()) {
    route.version = parts[2];
    next = 3;
  }
  if (parts.size() == next) return route;
  if (parts.size() == next + 1 && !parts[next].empty()) {
    route.action = parts[next];
    return route;
  }
  return absl::NotFoundError(absl::StrCat("no route ", path));
}

template <typename T>
struct Result {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::unique_ptr<T> value ABSL_GUARDED_BY(mu);
};

class Routes {
 public:
  explicit Routes(RequestPath* path) : calls_(path) {}

  void Register(HttpServer* server, const std::shared_ptr<Routes>& self) {
    server->Handle("GET", "/v2/health/live", [](const HttpRequest&, HttpResponse* res) {
      res->body = R"({"live":true})";
    });
    server->Handle("GET", "/v2/health/ready", [self](const HttpRequest&, HttpResponse* res) {
      const bool ready = self->calls_.ServerReady();
      res->status = ready ? 200 : 400;
      res->body = ready ? R"({"ready":true})" : R"({"ready":false})";
    });
    server->Handle("GET", "/v2", [self](const HttpRequest& req, HttpResponse* res) { self->ServerMetadata(req, res); });
    server->Handle("GET", "/v2/models/stats", [self](const HttpRequest& req, HttpResponse* res) {
      self->Statistics(req, ModelRoute{}, res);
    });
    server->HandlePrefix("GET", kModelsPrefix, [self](const HttpRequest& req, HttpResponse* res) { self->Get(req, res); });
    server->HandlePrefix("POST", kModelsPrefix,
                         [self](const HttpRequest& req, HttpResponse* res) { self->Post(req, res); });
  }

 private:
  RequestPath* path() { return calls_.path(); }

  // The call's identity and deadline; a bad request-timeout is refused.
  absl::Status ReadCall(const HttpRequest& req, const char* method, CallInfo* call, HttpResponse* res) {
    absl::Status status = ReadHttpCall(req, Protocol::kOip, call, res);
    if (!status.ok()) {
      path()->Refuse(*call, method, status);
      SendError(status, res);
    }
    return status;
  }

  void Unknown(const HttpRequest& req, const absl::Status& status, HttpResponse* res) {
    CallInfo call;
    call.protocol = Protocol::kOip;
    call.request_id = RequestIdFor(req.header(kRequestIdHeader));
    res->headers.emplace_back(kRequestIdHeader, call.request_id);
    path()->Refuse(call, "unknown_route", status);
    SendError(status, res);
  }

  template <typename Message>
  static void SendMessage(const absl::StatusOr<Message>& m, HttpResponse* res) {
    if (!m.ok()) return SendError(m.status(), res);
    res->content_type = "application/json";
    res->body = ProtoToJson(*m);
  }

  void ServerMetadata(const HttpRequest& req, HttpResponse* res) {
    CallInfo call;
    if (!ReadCall(req, "server_metadata", &call, res).ok()) return;
    SendMessage(calls_.ServerMetadata(call), res);
  }

  void Statistics(const HttpRequest& req, const ModelRoute& route, HttpResponse* res) {
    CallInfo call;
    if (!ReadCall(req, "model_statistics", &call, res).ok()) return;
    SendMessage(calls_.ModelStatistics(call, route.model, route.version), res);
  }

  void Get(const HttpRequest& req, HttpResponse* res) {
    auto route = ParseModelRoute(req.path());
    if (!route.ok()) return Unknown(req, route.status(), res);
    if (route->action == "ready") {
      const bool ready = calls_.ModelReady(route->model, route->version);
      res->status = ready ? 200 : 400;
      res->body = ready ? R"({"ready":true})" : R"({"ready":false})";
      return;
    }
    CallInfo call;
    if (route->action.empty()) {
      if (!ReadCall(req, "model_metadata", &call, res).ok()) return;
      return SendMessage(calls_.ModelMetadata(call, route->model, route->version), res);
    }
    if (route->action == "config") {
      if (!ReadCall(req, "model_config", &call, res).ok()) return;
      auto config = calls_.ModelConfig(call, route->model, route->version);
      if (!config.ok()) return SendError(config.status(), res);
      res->body = ProtoToJson(config->config());  // Triton's REST shape: the config itself
      return;
    }
    if (route->action == "stats") return Statistics(req, *route, res);
    Unknown(req, absl::NotFoundError(absl::StrCat("no route GET ", req.path())), res);
  }

  void Post(const HttpRequest& req, HttpResponse* res) {
    auto route = ParseModelRoute(req.path());
    if (!route.ok() || route->action != "infer") {
      return Unknown(req, absl::NotFoundError(absl::StrCat("no route POST ", req.path())), res);
    }
    CallInfo call;
    if (!ReadCall(req, "model_infer", &call, res).ok()) return;
    PreprocessGate::Ticket ticket;
    if (absl::Status s = path()->Admit(call, "model_infer", &ticket); !s.ok()) return SendError(s, res);
    auto parsed = ParseInfer(req, route->model, route->version);
    if (!parsed.ok()) {
      path()->Refuse(call, "model_infer", parsed.status());
      return SendError(parsed.status(), res);
    }
    auto result = std::make_shared<Result<inference::ModelInferResponse>>();
    calls_.Infer(call, (*parsed)->input, std::move(ticket),
                 [result](const absl::Status& status, std::unique_ptr<inference::ModelInferResponse> out) {
                   absl::MutexLock lock(&result->mu);
                   result->status = status;
                   result->value = std::move(out);
                   result->done = true;
                 });
    absl::MutexLock lock(&result->mu);
    result->mu.Await(absl::Condition(&result->done));
    if (!result->status.ok()) return SendError(result->status, res);
    res->headers.emplace_back("x-dserve-model-version", result->value->model_version());
    WriteInferResponse(**parsed, *result->value, res);
  }

  OipCalls calls_;
};

}  // namespace

void RegisterOipLoadingRoutes(HttpServer* server) {
  server->Handle("GET", "/v2/health/live", [](const HttpRequest&, HttpResponse* res) {
    res->body = R"({"live":true})";
  });
  auto not_ready = [](const HttpRequest&, HttpResponse* res) {
    res->status = 400;
    res->body = R"({"ready":false})";
  };
  server->Handle("GET", "/v2/health/ready", not_ready);
  server->HandlePrefix("GET", kModelsPrefix, [](const HttpRequest& req, HttpResponse* res) {
    res->status = absl::EndsWith(req.path(), "/ready") ? 400 : 503;
    res->body = res->status == 400 ? R"({"ready":false})" : R"({"error":"the server is loading its models"})";
  });
}

void RegisterOipRoutes(HttpServer* server, RequestPath* path) {
  auto routes = std::make_shared<Routes>(path);
  routes->Register(server, routes);
}

}  // namespace oip
}  // namespace dserve
