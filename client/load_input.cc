#include "client/load_input.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dserve {
namespace {

using Json = nlohmann::json;

absl::StatusOr<std::string> RequiredString(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a non-empty string"));
  }
  return it->get<std::string>();
}

// The strings under `list_key` (a non-empty array of strings), or the one
// under `single_key`.
absl::StatusOr<std::vector<std::string>> Strings(const Json& j, const char* list_key,
                                                 const char* single_key) {
  auto it = j.find(list_key);
  if (it == j.end()) {
    if (!j.contains(single_key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing \"", list_key, "\" (or \"", single_key, "\")"));
    }
    auto one = RequiredString(j, single_key);
    if (!one.ok()) return one.status();
    return std::vector<std::string>{*std::move(one)};
  }
  if (!it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", list_key, "\" must be a non-empty array"));
  }
  std::vector<std::string> out;
  for (const Json& e : *it) {
    if (!e.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("\"", list_key, "\" must hold strings"));
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

absl::Status FillClassify(const Json& j, const std::string& model, LoadRequest* r) {
  auto texts = Strings(j, "texts", "text");
  if (!texts.ok()) return texts.status();
  r->classify.set_model(model);
  for (auto& t : *texts) r->classify.add_texts(std::move(t));
  r->items = r->classify.texts_size();
  return absl::OkStatus();
}

absl::Status FillAnswer(const Json& j, const std::string& model, LoadRequest* r) {
  auto question = RequiredString(j, "question");
  if (!question.ok()) return question.status();
  auto contexts = Strings(j, "contexts", "context");
  if (!contexts.ok()) return contexts.status();
  r->answer.set_model(model);
  r->answer.set_question(*std::move(question));
  for (auto& c : *contexts) r->answer.add_contexts(std::move(c));
  r->items = r->answer.contexts_size();
  return absl::OkStatus();
}

absl::Status FillRerank(const Json& j, const std::string& model, LoadRequest* r) {
  auto query = RequiredString(j, "query");
  if (!query.ok()) return query.status();
  auto documents = Strings(j, "documents", "passage");
  if (!documents.ok()) return documents.status();
  r->rerank.set_model(model);
  r->rerank.set_query(*std::move(query));
  for (auto& d : *documents) r->rerank.add_documents(std::move(d));
  r->items = r->rerank.documents_size();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadTask> ParseLoadTask(std::string_view name) {
  if (name == "classify") return LoadTask::kClassify;
  if (name == "answer") return LoadTask::kAnswer;
  if (name == "rerank") return LoadTask::kRerank;
  return absl::InvalidArgumentError(
      absl::StrCat("task '", std::string(name), "': expected classify, answer or rerank"));
}

std::string_view LoadTaskName(LoadTask task) {
  switch (task) {
    case LoadTask::kClassify: return "classify";
    case LoadTask::kAnswer: return "answer";
    case LoadTask::kRerank: return "rerank";
  }
  return "?";
}

absl::StatusOr<LoadRequest> ParseLoadLine(LoadTask task, const std::string& model,
                                          std::string_view line) {
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  LoadRequest request;
  request.task = task;
  absl::Status status;
  switch (task) {
    case LoadTask::kClassify: status = FillClassify(j, model, &request); break;
    case LoadTask::kAnswer: status = FillAnswer(j, model, &request); break;
    case LoadTask::kRerank: status = FillRerank(j, model, &request); break;
  }
  if (!status.ok()) return status;
  return request;
}

absl::StatusOr<std::vector<LoadRequest>> ParseLoadInput(LoadTask task, const std::string& model,
                                                        std::istream& in) {
  std::vector<LoadRequest> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    auto request = ParseLoadLine(task, model, line);
    if (!request.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": ", request.status().message(),
                                                     " (", std::string(LoadTaskName(task)), " input)"));
    }
    out.push_back(*std::move(request));
  }
  if (out.empty()) return absl::InvalidArgumentError("no requests in the input");
  return out;
}

absl::StatusOr<std::vector<LoadRequest>> ReadLoadInputFile(LoadTask task, const std::string& model,
                                                           const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--input: cannot read ", path));
  auto requests = ParseLoadInput(task, model, in);
  if (!requests.ok()) {
    return absl::Status(requests.status().code(),
                        absl::StrCat(path, ": ", requests.status().message()));
  }
  return requests;
}

namespace {

void AddBytes(const std::string& name, const std::vector<std::string>& values, inference::ModelInferRequest* r) {
  auto* t = r->add_inputs();
  t->set_name(name);
  t->set_datatype("BYTES");
  t->add_shape(static_cast<int64_t>(values.size()));
  for (const auto& v : values) t->mutable_contents()->add_bytes_contents(v);
}

}  // namespace

inference::ModelInferRequest ToModelInfer(const LoadRequest& request) {
  inference::ModelInferRequest r;
  switch (request.task) {
    case LoadTask::kClassify:
      r.set_model_name(request.classify.model());
      AddBytes("TEXT", {request.classify.texts().begin(), request.classify.texts().end()}, &r);
      break;
    case LoadTask::kAnswer:
      r.set_model_name(request.answer.model());
      AddBytes("QUESTION", {request.answer.question()}, &r);
      AddBytes("CONTEXT", {request.answer.contexts().begin(), request.answer.contexts().end()}, &r);
      break;
    case LoadTask::kRerank:
      r.set_model_name(request.rerank.model());
      AddBytes("QUERY", {request.rerank.query()}, &r);
      AddBytes("DOCUMENTS", {request.rerank.documents().begin(), request.rerank.documents().end()}, &r);
      break;
  }
  return r;
}

}  // namespace dserve
