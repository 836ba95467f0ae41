#include "server/doors/oip/oip_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/model_registry.h"

#ifndef DSERVE_VERSION
#define DSERVE_VERSION "dev"
#endif

namespace dserve {
namespace oip {
namespace {

// The path's completion for one task: the v1 response as OIP outputs.
template <typename Response>
Completion<Response> Convert(std::shared_ptr<const V1Call> call, std::shared_ptr<const ServedModel> model,
                             InferDone done) {
  return [call = std::move(call), model = std::move(model), done = std::move(done)](
             const absl::Status& status, std::unique_ptr<Response> response) {
    if (!status.ok()) return done(WithTensorNames(status, call->task), nullptr);
    auto out = std::make_unique<inference::ModelInferResponse>();
    absl::Status s = ToInferResponse(*call, *model, *response, out.get());
    if (!s.ok()) return done(absl::InternalError(absl::StrCat("OIP response: ", s.message())), nullptr);
    done(absl::OkStatus(), std::move(out));
  };
}

}  // namespace

absl::Status WithTensorNames(const absl::Status& status, Task task) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  static const std::pair<const char*, const char*> kClassify[] = {{"text_pairs", "TEXT_PAIR"}, {"texts", "TEXT"}};
  static const std::pair<const char*, const char*> kAnswer[] = {{"question", "QUESTION"}, {"contexts", "CONTEXT"}};
  static const std::pair<const char*, const char*> kRerank[] = {{"query", "QUERY"}, {"documents", "DOCUMENTS"}};
  absl::Span<const std::pair<const char*, const char*>> names;
  if (task == Task::kClassify) names = kClassify;
  if (task == Task::kAnswer) names = kAnswer;
  if (task == Task::kRerank) names = kRerank;
  const absl::string_view message = status.message();
  for (const auto& [field, tensor] : names) {
    const absl::string_view f(field);
    if (absl::StartsWith(message, f) && message.size() > f.size() && (message[f.size()] == '[' || message[f.size()] == ':')) {
      return absl::InvalidArgumentError(absl::StrCat("input ", tensor, message.substr(f.size())));
    }
  }
  return status;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> OipCalls::Find(const std::string& name,
                                                                  const std::string& version) const {
  auto found = path_->FindModel(name);
  if (!found.ok()) return found.status();
  if (!version.empty() && version != (*found)->version) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' version '", version,
                                            "' is not served (serving version '", (*found)->version, "')"));
  }
  return found;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> OipCalls::CheckAndFind(const CallInfo& call, const char* method,
                                                                          const std::string& name,
                                                                          const std::string& version) {
  absl::Status s = path_->CheckCaller(call);
  absl::StatusOr<std::shared_ptr<const ServedModel>> found = s.ok() ? Find(name, version) : s;
  if (!found.ok()) path_->Refuse(call, method, found.status());
  return found;
}

std::shared_ptr<CallHandle> OipCalls::Infer(CallInfo call, const InferInput& input, PreprocessGate::Ticket ticket,
                                            InferDone done) {
  auto found = Find(input.model, input.version);
  if (!found.ok()) {
    path_->Refuse(call, "model_infer", found.status());
    done(found.status(), nullptr);
    return nullptr;
  }
  std::shared_ptr<const ServedModel> model = *std::move(found);
  auto converted = ToV1Call(input, *model);
  if (!converted.ok()) {
    path_->Refuse(call, TaskName(model->task), converted.status());
    done(converted.status(), nullptr);
    return nullptr;
  }
  if (converted->timeout) call.deadline = std::min(call.deadline, call.received + *converted->timeout);
  if (converted->priority) call.priority = converted->priority;
  auto v1 = std::make_shared<V1Call>(*std::move(converted));
  switch (v1->task) {
    case Task::kClassify: {
      auto request = std::move(v1->classify);
      return path_->Classify(call, std::move(request), std::move(ticket),
                             Convert<v1::ClassifyResponse>(v1, model, std::move(done)));
    }
    case Task::kAnswer: {
      auto request = std::move(v1->answer);
      return path_->Answer(call, std::move(request), std::move(ticket),
                           Convert<v1::AnswerResponse>(v1, model, std::move(done)));
    }
    case Task::kRerank: {
      auto request = std::move(v1->rerank);
      return path_->Rerank(call, std::move(request), std::move(ticket),
                           Convert<v1::RerankResponse>(v1, model, std::move(done)));
    }
    default:
      break;
  }
  absl::Status s = absl::InternalError("OIP: a converted call without a task");
  path_->Refuse(call, "model_infer", s);
  done(s, nullptr);
  return nullptr;
}

bool OipCalls::ModelReady(const std::string& name, const std::string& version) const {
  return !path_->draining() && Find(name, version).ok();
}

absl::StatusOr<inference::ServerMetadataResponse> OipCalls::ServerMetadata(const CallInfo& call) {
  if (absl::Status s = path_->CheckCaller(call); !s.ok()) {
    path_->Refuse(call, "server_metadata", s);
    return s;
  }
  inference::ServerMetadataResponse out;
  out.set_name("dserve");
  out.set_version(DSERVE_VERSION);
  for (const auto& e : ServerExtensions()) out.add_extensions(e);
  return out;
}

absl::StatusOr<inference::ModelMetadataResponse> OipCalls::ModelMetadata(const CallInfo& call,
                                                                         const std::string& name,
                                                                         const std::string& version) {
  auto m = CheckAndFind(call, "model_metadata", name, version);
  if (!m.ok()) return m.status();
  inference::ModelMetadataResponse out;
  FillModelMetadata(**m, &out);
  return out;
}

absl::StatusOr<inference::ModelConfigResponse> OipCalls::ModelConfig(const CallInfo& call, const std::string& name,
                                                                     const std::string& version) {
  auto m = CheckAndFind(call, "model_config", name, version);
  if (!m.ok()) return m.status();
  inference::ModelConfigResponse out;
  FillModelConfig(**m, path_->options(), out.mutable_config());
  return out;
}

absl::StatusOr<inference::ModelStatisticsResponse> OipCalls::ModelStatistics(const CallInfo& call,
                                                                             const std::string& name,
                                                                             const std::string& version) {
  inference::ModelStatisticsResponse out;
  if (name.empty()) {
    if (absl::Status s = path_->CheckCaller(call); !s.ok()) {
      path_->Refuse(call, "model_statistics", s);
      return s;
    }
    for (const auto& m : path_->registry().models()) FillModelStatistics(*m, out.add_model_stats());
    return out;
  }
  auto m = CheckAndFind(call, "model_statistics", name, version);
  if (!m.ok()) return m.status();
  FillModelStatistics(**m, out.add_model_stats());
  return out;
}

}  // namespace oip
}  // namespace dserve
