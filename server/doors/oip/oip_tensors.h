// The Open Inference Protocol's tensor contract of dserve's tasks (docs/api.md,
// "Open Inference Protocol"): tensors <-> dserve.v1 requests and responses.
// The one conversion both OIP doors use (REST: oip_rest.h, gRPC:
// oip_grpc_service.h): each door reads its wire format into an InferInput,
// this validates it and builds the v1 request, and turns the v1 response
// into a ModelInferResponse the door writes back in its own format.
//
//   classify: TEXT (BYTES [N] or [N,1]), optional TEXT_PAIR (same shape)
//             -> PROBABILITIES (FP32 [N, labels], label-id order),
//                LABEL (BYTES [N, k]: the best label, or the top_k best first)
//   answer:   QUESTION (BYTES, one element), CONTEXT (BYTES [C] or [C,1])
//             -> ANSWER (BYTES [K]), SCORE (FP32 [K]), START, END (INT64 [K],
//                code-point offsets), CONTEXT_INDEX (INT64 [K]),
//                NO_ANSWER (BOOL [1]), NO_ANSWER_SCORE (FP32 [1])
//   rerank:   QUERY (BYTES, one element), DOCUMENTS (BYTES [D] or [D,1])
//             -> SCORES (FP32 [D], input order)
// Request parameters: top_k, raw_scores, truncation, max_answer_length,
// max_answer_chars, no_answer_threshold, priority, timeout (microseconds).
//
// Pure functions: no gRPC server, no HTTP; errors are INVALID_ARGUMENT
// naming the tensor (or parameter) and what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dserve/v1/inference.pb.h"
#include "inference/grpc_service.pb.h"
#include "model/checkpoint/model_config.h"
#include "server/options.h"

namespace dserve {

struct ServedModel;

namespace oip {

using Parameters = google::protobuf::Map<std::string, inference::InferParameter>;

// One input tensor as a door read it. The data is either typed (`contents`,
// not owned) or raw (`raw`: the tensor's bytes, a BYTES element as a 4-byte
// little-endian length then its bytes); neither = no data sent.
struct InputTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  const inference::InferTensorContents* contents = nullptr;
  std::optional<absl::string_view> raw;
};

// An inference request as a door read it. Views: what `parameters`,
// `contents` and `raw` point to must outlive the InferInput's use.
struct InferInput {
  std::string model;
  std::string version;  // "" = the version serving now
  std::string id;
  const Parameters* parameters = nullptr;  // may be null
  std::vector<InputTensor> inputs;
  std::vector<std::string> outputs;        // requested outputs; empty = all
};

// A gRPC ModelInferRequest as an InferInput (views into `request`). Checks
// raw_input_contents: one per input and no input with contents, or none.
absl::StatusOr<InferInput> FromGrpcRequest(const inference::ModelInferRequest& request);

// The v1 call an InferInput asks for, and what shaping its response needs.
struct V1Call {
  Task task = Task::kNone;
  // Exactly the one of the task is set (its `model` is set too).
  std::unique_ptr<v1::ClassifyRequest> classify;
  std::unique_ptr<v1::AnswerRequest> answer;
  std::unique_ptr<v1::RerankRequest> rerank;
  // The outputs to return, in the order the model declares them.
  std::vector<std::string> outputs;
  std::string id;
  // classify: labels per text in LABEL (1, or top_k).
  int64_t label_columns = 1;
  // rerank: documents sent (SCORES has one per document).
  int64_t documents = 0;
  // Request parameters "timeout" (microseconds) and "priority".
  std::optional<absl::Duration> timeout;
  std::optional<int> priority;
};

// Validates `input` against the tensor contract of `model`'s task and builds
// the v1 request (nothing is tokenized or queued here). Errors name the
// tensor or parameter. `input.model` must name `model` (the caller found it).
absl::StatusOr<V1Call> ToV1Call(const InferInput& input, const ServedModel& model);

// The v1 response as OIP outputs (typed contents; model name, version, id).
absl::Status ToInferResponse(const V1Call& call, const ServedModel& model, const v1::ClassifyResponse& response,
                             inference::ModelInferResponse* out);
absl::Status ToInferResponse(const V1Call& call, const ServedModel& model, const v1::AnswerResponse& response,
                             inference::ModelInferResponse* out);
absl::Status ToInferResponse(const V1Call& call, const ServedModel& model, const v1::RerankResponse& response,
                             inference::ModelInferResponse* out);

// The raw encoding of an output's typed contents (little-endian elements;
// BYTES as 4-byte length + bytes).
std::string RawOutput(const inference::ModelInferResponse::InferOutputTensor& output);
// Moves every output's contents into raw_output_contents (the gRPC reply to
// a request that sent raw_input_contents, as Triton's clients expect).
void UseRawOutputs(inference::ModelInferResponse* response);

// Splits raw BYTES data into its elements (views into `raw`); the error
// names `tensor` and the byte offset where the data stops making sense.
absl::StatusOr<std::vector<absl::string_view>> SplitRawBytes(absl::string_view raw, absl::string_view tensor);

// A served model's OIP metadata: inputs and outputs of its task.
void FillModelMetadata(const ServedModel& model, inference::ModelMetadataResponse* out);
// Triton's model configuration of a served model: max_batch_size (classify:
// --max-texts-per-request; answer, rerank: 0, one query per request), inputs
// and outputs as in the metadata (without the batch dimension),
// dynamic_batching (--max-queue-delay-us), instance_group (--workers).
void FillModelConfig(const ServedModel& model, const ServeOptions& options, inference::ModelConfig* out);
// Triton's statistics of a served model from its counters (ModelMetrics::Stats).
void FillModelStatistics(const ServedModel& model, inference::ModelStatistics* out);

// The extensions the OIP doors serve (ServerMetadata.extensions).
std::vector<std::string> ServerExtensions();

}  // namespace oip
}  // namespace dserve
