#include "server/doors/http/http_json.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dserve {
namespace {

using nlohmann::json;

absl::Status ParseError(absl::string_view what) { return absl::InvalidArgumentError(what); }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The body as a JSON object, or a parse error (not JSON, not UTF-8 (nlohmann
// checks strings), not an object).
absl::StatusOr<json> ParseObject(absl::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the message (only on the error path).
    try {
      const json again = json::parse(body.begin(), body.end());  // throws here
      (void)again;
    } catch (const json::parse_error& e) {
      return ParseError(absl::StrCat("body is not valid JSON (UTF-8): ", e.what()));
    }
    return ParseError("body is not valid JSON");
  }
  if (!j.is_object()) return ParseError("body must be a JSON object");
  return j;
}

absl::Status Expect(const json& v, bool ok, absl::string_view field, absl::string_view type) {
  if (ok) return absl::OkStatus();
  return ParseError(absl::StrCat("'", field, "' must be ", type, " (got ", v.type_name(), ")"));
}

// Optional typed getters: absent or null leaves *out unchanged.
absl::Status GetString(const json& j, const char* field, std::string* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (auto s = Expect(*it, it->is_string(), field, "a string"); !s.ok()) return s;
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const char* field, std::optional<bool>* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (auto s = Expect(*it, it->is_boolean(), field, "true or false"); !s.ok()) return s;
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status GetUint(const json& j, const char* field, uint32_t max, std::optional<uint32_t>* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer() || (it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0) ||
      it->get<uint64_t>() > max) {
    return ParseError(absl::StrCat("'", field, "' must be an integer between 0 and ", max));
  }
  *out = static_cast<uint32_t>(it->get<uint64_t>());
  return absl::OkStatus();
}

absl::Status GetStringList(const json& j, const char* field, bool required, std::vector<std::string>* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    return required ? ParseError(absl::StrCat("'", field, "' is required")) : absl::OkStatus();
  }
  if (auto s = Expect(*it, it->is_array(), field, "a list of strings"); !s.ok()) return s;
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_string()) return ParseError(absl::StrCat("'", field, "[", i, "]' must be a string (got ", v.type_name(), ")"));
    out->push_back(v.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status GetCallOptions(const json& j, CallOptions* call) {
  if (auto it = j.find("timeout_ms"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
      return ParseError("'timeout_ms' must be a number of milliseconds > 0");
    }
    call->timeout = absl::Microseconds(static_cast<int64_t>(it->get<double>() * 1000));
  }
  if (auto it = j.find("priority"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < INT32_MIN || it->get<int64_t>() > INT32_MAX) {
      return ParseError("'priority' must be a 32-bit integer");
    }
    call->priority = static_cast<int>(it->get<int64_t>());
  }
  return absl::OkStatus();
}

// TEI's "truncation_direction": "Right" (default) or "Left" (either case).
absl::Status GetDirection(const json& j, v1::TruncationDirection* out) {
  auto it = j.find("truncation_direction");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const std::string v = it->is_string() ? it->get<std::string>() : "";
  if (v == "Right" || v == "right") {
    *out = v1::TRUNCATION_DIRECTION_RIGHT;
  } else if (v == "Left" || v == "left") {
    *out = v1::TRUNCATION_DIRECTION_LEFT;
  } else {
    return ParseError(absl::StrCat("'truncation_direction' must be \"Right\" or \"Left\" (got ", Dump(*it), ")"));
  }
  return absl::OkStatus();
}

v1::Truncation TruncationOf(std::optional<bool> truncate) {
  if (!truncate.has_value()) return v1::TRUNCATION_UNSPECIFIED;
  return *truncate ? v1::TRUNCATION_LONGEST_FIRST : v1::TRUNCATION_NONE;
}

json LabelList(const v1::Classification& c) {
  json labels = json::array();
  for (const auto& l : c.labels()) labels.push_back({{"label", l.label()}, {"score", static_cast<double>(l.score())}});
  return labels;
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument: return 422;
    case absl::StatusCode::kOutOfRange: return 422;
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    default: return 500;
  }
}

const char* HttpErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 422: return "validation";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408:
    case 504: return "timeout";
    case 413: return "payload_too_large";
    case 429: return "overloaded";
    case 499: return "cancelled";
    case 503: return "unhealthy";
    default: return "backend";
  }
}

absl::StatusOr<absl::Duration> ParseRequestTimeout(absl::string_view value) {
  double ms = 0;
  absl::Duration d;
  if (absl::SimpleAtod(value, &ms) && std::isfinite(ms)) {
    d = absl::Microseconds(static_cast<int64_t>(ms * 1000));
  } else if (!absl::ParseDuration(value, &d)) {
    return ParseError(absl::StrCat("request-timeout: '", value,
                                   "' is not a duration (milliseconds, or with a unit: 2s, 250ms)"));
  }
  if (d <= absl::ZeroDuration()) return ParseError(absl::StrCat("request-timeout: '", value, "' must be > 0"));
  return d;
}

absl::StatusOr<std::string> ChooseModel(const std::vector<std::pair<std::string, std::string>>& served,
                                        const std::string& requested, const std::string& default_model,
                                        absl::string_view task) {
  if (!requested.empty()) return requested;
  std::vector<std::string> of_task;
  for (const auto& [name, t] : served) {
    if (!task.empty() && t != task) continue;
    if (name == default_model) return name;
    of_task.push_back(name);
  }
  if (of_task.size() == 1) return of_task[0];
  const std::string kind = task.empty() ? std::string("") : absl::StrCat(task, " ");
  if (of_task.empty()) return absl::NotFoundError(absl::StrCat("no ", kind, "model is served"));
  return absl::InvalidArgumentError(absl::StrCat("several ", kind, "models are served (", absl::StrJoin(of_task, ", "),
                                                 "): name one with ?model=NAME (or start the server with "
                                                 "--http-default-model)"));
}

// ------------------------------------------------------------------- TEI --

absl::StatusOr<TeiPredict> ParseTeiPredict(absl::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  TeiPredict out;
  out.request = std::make_unique<v1::ClassifyRequest>();
  auto it = j->find("inputs");
  if (it == j->end() || it->is_null()) return ParseError("'inputs' is required");
  if (it->is_string()) {
    out.request->add_texts(it->get<std::string>());
  } else if (it->is_array()) {
    // A batch: texts, or sequences [text] / [text, text_pair] (all of one
    // kind: a request holds single texts or pairs).
    out.batched = true;
    const bool sequences = !it->empty() && (*it)[0].is_array();
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      if (!sequences) {
        if (!v.is_string()) {
          return ParseError(absl::StrCat("'inputs[", i, "]' must be a string like inputs[0] (got ", v.type_name(), ")"));
        }
        out.request->add_texts(v.get<std::string>());
        continue;
      }
      if (!v.is_array() || v.empty() || v.size() > 2 || !v[0].is_string() || (v.size() == 2 && !v[1].is_string())) {
        return ParseError(absl::StrCat("'inputs[", i, "]' must be [text] or [text, text_pair] like inputs[0]"));
      }
      if (v.size() != (*it)[0].size()) {
        return ParseError(absl::StrCat("'inputs[", i, "]': a batch holds single texts or pairs, not both (inputs[0] has ",
                                       (*it)[0].size(), " strings, inputs[", i, "] ", v.size(), ")"));
      }
      out.request->add_texts(v[0].get<std::string>());
      if (v.size() == 2) out.request->add_text_pairs(v[1].get<std::string>());
    }
  } else {
    return Expect(*it, false, "inputs", "a string, a list of strings or a list of [text, text_pair]");
  }
  std::optional<bool> raw, truncate;
  if (auto s = GetBool(*j, "raw_scores", &raw); !s.ok()) return s;
  if (auto s = GetBool(*j, "truncate", &truncate); !s.ok()) return s;
  v1::TruncationDirection direction = v1::TRUNCATION_DIRECTION_RIGHT;
  if (auto s = GetDirection(*j, &direction); !s.ok()) return s;
  out.request->set_raw_scores(raw.value_or(false));
  out.request->set_truncation(TruncationOf(truncate));
  out.request->set_truncation_direction(direction);
  if (auto s = GetCallOptions(*j, &out.call); !s.ok()) return s;
  if (out.call.priority) out.request->set_priority(*out.call.priority);
  return out;
}

std::string TeiPredictResponse(const v1::ClassifyResponse& response, bool batched) {
  if (!batched) return Dump(response.results_size() > 0 ? LabelList(response.results(0)) : json::array());
  json all = json::array();
  for (const auto& c : response.results()) all.push_back(LabelList(c));
  return Dump(all);
}

absl::StatusOr<TeiRerank> ParseTeiRerank(absl::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  TeiRerank out;
  out.request = std::make_unique<v1::RerankRequest>();
  std::string query;
  if (!j->contains("query")) return ParseError("'query' is required");
  if (auto s = GetString(*j, "query", &query); !s.ok()) return s;
  out.request->set_query(query);
  std::vector<std::string> texts;
  if (auto s = GetStringList(*j, "texts", /*required=*/true, &texts); !s.ok()) return s;
  for (auto& t : texts) out.request->add_documents(std::move(t));
  std::optional<bool> raw, return_text, truncate;
  if (auto s = GetBool(*j, "raw_scores", &raw); !s.ok()) return s;
  if (auto s = GetBool(*j, "return_text", &return_text); !s.ok()) return s;
  if (auto s = GetBool(*j, "truncate", &truncate); !s.ok()) return s;
  v1::TruncationDirection direction = v1::TRUNCATION_DIRECTION_RIGHT;
  if (auto s = GetDirection(*j, &direction); !s.ok()) return s;
  out.request->set_raw_scores(raw.value_or(false));
  out.return_text = return_text.value_or(false);
  out.request->set_return_documents(out.return_text);
  out.request->set_truncation(TruncationOf(truncate));
  out.request->set_truncation_direction(direction);
  if (auto s = GetCallOptions(*j, &out.call); !s.ok()) return s;
  if (out.call.priority) out.request->set_priority(*out.call.priority);
  return out;
}

std::string TeiRerankResponse(const v1::RerankResponse& response, bool return_text) {
  json out = json::array();
  for (const auto& r : response.results()) {
    json item = {{"index", r.index()}, {"score", static_cast<double>(r.score())}};
    if (return_text) item["text"] = r.document();
    out.push_back(std::move(item));
  }
  return Dump(out);
}

absl::StatusOr<TeiTokenize> ParseTeiTokenize(absl::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  TeiTokenize out;
  auto it = j->find("inputs");
  if (it == j->end() || it->is_null()) return ParseError("'inputs' is required");
  if (it->is_string()) {
    out.inputs.push_back(it->get<std::string>());
  } else {
    out.batched = true;
    if (auto s = GetStringList(*j, "inputs", true, &out.inputs); !s.ok()) return s;
  }
  std::optional<bool> specials;
  if (auto s = GetBool(*j, "add_special_tokens", &specials); !s.ok()) return s;
  out.add_special_tokens = specials.value_or(true);
  if (auto s = GetCallOptions(*j, &out.call); !s.ok()) return s;
  return out;
}

std::string TeiTokenizeResponse(const std::vector<std::vector<TokenJson>>& tokens) {
  json out = json::array();
  for (const auto& one : tokens) {
    json list = json::array();
    for (const auto& t : one) {
      list.push_back({{"id", t.id}, {"text", t.text}, {"special", t.special}, {"start", t.start}, {"stop", t.stop}});
    }
    out.push_back(std::move(list));
  }
  return Dump(out);
}

// ---------------------------------------------------------------- Cohere --

absl::StatusOr<CohereRerank> ParseCohereRerank(absl::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  CohereRerank out;
  out.request = std::make_unique<v1::RerankRequest>();
  std::string model, query;
  if (auto s = GetString(*j, "model", &model); !s.ok()) return s;
  if (!j->contains("query")) return ParseError("'query' is required");
  if (auto s = GetString(*j, "query", &query); !s.ok()) return s;
  out.request->set_model(model);
  out.request->set_query(query);
  auto it = j->find("documents");
  if (it == j->end() || it->is_null()) return ParseError("'documents' is required");
  if (auto s = Expect(*it, it->is_array(), "documents", "a list"); !s.ok()) return s;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& d = (*it)[i];
    if (d.is_string()) {
      out.request->add_documents(d.get<std::string>());
    } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
      out.request->add_documents(d["text"].get<std::string>());
    } else {
      return ParseError(absl::StrCat("'documents[", i, "]' must be a string or {\"text\": string}"));
    }
  }
  std::optional<uint32_t> top_n, max_chunks;
  std::optional<bool> return_documents;
  if (auto s = GetUint(*j, "top_n", UINT32_MAX, &top_n); !s.ok()) return s;
  if (auto s = GetBool(*j, "return_documents", &return_documents); !s.ok()) return s;
  if (auto s = GetUint(*j, "max_chunks_per_doc", UINT32_MAX, &max_chunks); !s.ok()) return s;
  if (max_chunks.has_value() && *max_chunks == 0) return ParseError("'max_chunks_per_doc' must be at least 1");
  out.request->set_top_n(top_n.value_or(0));
  out.request->set_max_chunks_per_document(max_chunks.value_or(0));
  out.request->set_return_documents(return_documents.value_or(false));
  if (auto s = GetCallOptions(*j, &out.call); !s.ok()) return s;
  if (out.call.priority) out.request->set_priority(*out.call.priority);
  return out;
}

std::string CohereRerankResponse(const v1::RerankResponse& response, const std::string& request_id,
                                 bool return_documents) {
  json results = json::array();
  for (const auto& r : response.results()) {
    json item = {{"index", r.index()}, {"relevance_score", static_cast<double>(r.score())}};
    if (return_documents) item["document"] = {{"text", r.document()}};
    results.push_back(std::move(item));
  }
  json out = {{"id", request_id},
              {"results", std::move(results)},
              {"model", response.model()},
              {"meta", {{"api_version", {{"version", "1"}}}, {"billed_units", {{"search_units", 1}}}}},
              {"usage", {{"total_tokens", response.usage().tokens()}}}};
  return Dump(out);
}

// ----------------------------------------------------------- HF question --

absl::StatusOr<HfAnswer> ParseHfAnswer(absl::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  HfAnswer out;
  out.request = std::make_unique<v1::AnswerRequest>();
  std::string model;
  if (auto s = GetString(*j, "model", &model); !s.ok()) return s;
  out.request->set_model(model);
  auto in = j->find("inputs");
  if (in == j->end() || !in->is_object()) return ParseError("'inputs' must be {\"question\": string, \"context\": string}");
  std::string question, context;
  if (!in->contains("question") || !in->contains("context")) {
    return ParseError("'inputs' must have 'question' and 'context'");
  }
  if (auto s = GetString(*in, "question", &question); !s.ok()) return s;
  if (auto s = GetString(*in, "context", &context); !s.ok()) return s;
  out.request->set_question(question);
  out.request->add_contexts(context);
  if (auto p = j->find("parameters"); p != j->end() && !p->is_null()) {
    if (!p->is_object()) return ParseError("'parameters' must be an object");
    std::optional<uint32_t> top_k, max_len, max_chars;
    std::optional<bool> impossible;
    if (auto s = GetUint(*p, "top_k", 1000, &top_k); !s.ok()) return s;
    if (auto s = GetUint(*p, "max_answer_len", 100000, &max_len); !s.ok()) return s;
    if (auto s = GetUint(*p, "max_answer_chars", UINT32_MAX, &max_chars); !s.ok()) return s;
    if (auto s = GetBool(*p, "handle_impossible_answer", &impossible); !s.ok()) return s;
    std::optional<uint32_t> doc_stride;  // accepted, ignored (header comment)
    if (auto s = GetUint(*p, "doc_stride", 100000, &doc_stride); !s.ok()) return s;
    if (auto t = p->find("null_score_diff_threshold"); t != p->end() && !t->is_null()) {
      if (!t->is_number()) return ParseError("'parameters.null_score_diff_threshold' must be a number");
      out.request->set_null_score_diff_threshold(t->get<float>());
    }
    out.top_k = static_cast<int>(std::max<uint32_t>(1, top_k.value_or(1)));
    out.handle_impossible_answer = impossible.value_or(false);
    out.request->set_max_answer_tokens(max_len.value_or(0));
    out.request->set_max_answer_chars(max_chars.value_or(0));
  }
  out.request->set_top_k(static_cast<uint32_t>(out.top_k));
  if (auto s = GetCallOptions(*j, &out.call); !s.ok()) return s;
  if (out.call.priority) out.request->set_priority(*out.call.priority);
  return out;
}

std::string HfAnswerResponse(const v1::AnswerResponse& response, const HfAnswer& call) {
  const double no_answer_score = response.no_answer_score();
  auto item = [&](const std::string& text, double score, uint32_t start, uint32_t end) {
    return json{{"answer", text}, {"score", score}, {"start", start}, {"end", end}, {"no_answer_score", no_answer_score}};
  };
  json list = json::array();
  for (const auto& a : response.answers()) list.push_back(item(a.text(), a.score(), a.start_char(), a.end_char()));
  if (call.handle_impossible_answer) {
    // First when the model says no answer, else after the spans that score
    // higher (never before the best span: the threshold decided).
    size_t at = 0;
    if (!response.no_answer()) {
      at = 1;
      while (at < list.size() && list[at]["score"].get<double>() >= no_answer_score) ++at;
      at = std::min(at, list.size());
    }
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(at), item("", no_answer_score, 0, 0));
  } else if (list.empty()) {
    list.push_back(item("", 0.0, 0, 0));
  }
  if (list.size() > static_cast<size_t>(call.top_k)) list.erase(list.begin() + call.top_k, list.end());
  return Dump(call.top_k > 1 ? list : list[0]);
}

// ---------------------------------------------------------------- proto3 --

absl::Status ParseProtoJson(absl::string_view body, google::protobuf::Message* message, CallOptions* call) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  // Fast path: a body without "timeout_ms" is parsed once, by protobuf.
  if (body.find("timeout_ms") == absl::string_view::npos &&
      google::protobuf::util::JsonStringToMessage(google::protobuf::StringPiece(body.data(), body.size()), message,
                                                  options)
          .ok()) {
    if (const auto* field = message->GetDescriptor()->FindFieldByName("priority");
        field != nullptr && message->GetReflection()->HasField(*message, field)) {
      call->priority = message->GetReflection()->GetInt32(*message, field);
    }
    return absl::OkStatus();
  }
  message->Clear();
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  if (auto s = GetCallOptions(*j, call); !s.ok()) return s;
  j->erase("timeout_ms");
  auto s = google::protobuf::util::JsonStringToMessage(Dump(*j), message, options);
  if (!s.ok()) {
    return ParseError(absl::StrCat("body is not a ", message->GetDescriptor()->full_name(), " in proto3 JSON: ",
                                   std::string(s.message())));
  }
  return absl::OkStatus();
}

std::string ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

}  // namespace dserve
