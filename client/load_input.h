// Inputs of `dserve-client load`: one JSONL line per request.
//   classify: {"text": s} or {"texts": [s, ...]}
//   answer:   {"question": q, "context": c} or {"question": q, "contexts": [c, ...]}
//   rerank:   {"query": q, "documents": [d, ...]} or {"query": q, "passage": p}
// Other keys (labels, ids, ...) are ignored, so training and eval files work
// as they are. Blank lines are skipped.
#pragma once

#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "dserve/v1/inference.pb.h"
#include "inference/grpc_service.pb.h"

namespace dserve {

enum class LoadTask { kClassify, kAnswer, kRerank };

// "classify" | "answer" | "rerank".
absl::StatusOr<LoadTask> ParseLoadTask(std::string_view name);
std::string_view LoadTaskName(LoadTask task);

// One prepared request; only the member of `task` is filled.
struct LoadRequest {
  LoadTask task = LoadTask::kClassify;
  v1::ClassifyRequest classify;
  v1::AnswerRequest answer;
  v1::RerankRequest rerank;
  // Inputs the request carries: texts, contexts or documents.
  int items = 0;
};

// The same request as an Open Inference Protocol ModelInfer (the tensor
// contract of docs/api.md: classify TEXT; answer QUESTION, CONTEXT; rerank
// QUERY, DOCUMENTS; all BYTES).
inference::ModelInferRequest ToModelInfer(const LoadRequest& request);

// Parses one line for `model`. Errors name the missing or ill-typed key.
absl::StatusOr<LoadRequest> ParseLoadLine(LoadTask task, const std::string& model,
                                          std::string_view line);

// Parses a whole JSONL stream; errors carry the 1-based line number. At least
// one request is required.
absl::StatusOr<std::vector<LoadRequest>> ParseLoadInput(LoadTask task, const std::string& model,
                                                        std::istream& in);
absl::StatusOr<std::vector<LoadRequest>> ReadLoadInputFile(LoadTask task,
                                                           const std::string& model,
                                                           const std::string& path);

}  // namespace dserve
