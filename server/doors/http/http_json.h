// The HTTP/JSON wire formats of the front door (server/doors/http/http_routes.h):
// pure translation between JSON bodies and the v1 messages, and between
// absl status codes and HTTP statuses. No I/O, no model, no RequestPath:
// everything here is unit-tested on its own (tests/server/http_json_test.cc).
//
// Shapes (docs/api.md, "HTTP/JSON API"; server/doors/http/openapi.json):
//   TEI        POST /predict   {"inputs": str | [str] | [[str] | [str, str]], "raw_scores", "truncate",
//                               "truncation_direction": "Right" | "Left"}
//              POST /rerank    {"query", "texts", "raw_scores", "return_text", "truncate",
//                               "truncation_direction"}
//              POST /tokenize  {"inputs": str | [str], "add_special_tokens"}
//   Cohere     POST /v1/rerank {"model", "query", "documents": [str | {"text"}], "top_n", "return_documents",
//                               "max_chunks_per_doc"}
//   HF QA      POST /v1/answer {"model", "inputs": {"question", "context"}, "parameters": {...}}
//   proto3     POST /v1/classify and /dserve.v1.Inference/<Method>: the v1
//              messages in protobuf's JSON mapping (unknown fields refused).
// Every body may also carry "timeout_ms" (the call's deadline, like the
// `request-timeout` header) and "priority" (the v1 field). The compatible
// shapes ignore fields they do not know (their clients send extras); the
// proto3 routes refuse them, as gRPC would refuse unknown values.
//
// A body that is not JSON, not UTF-8 or not of the route's shape is a parse
// error: INVALID_ARGUMENT with a message naming the field, sent as 400.
// INVALID_ARGUMENT from the request path (a limit, an empty text) is 422.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dserve/v1/inference.pb.h"

namespace dserve {

// ---------------------------------------------------------------- status --

// The HTTP status of a status code the request path returned (see
// docs/api.md): INVALID_ARGUMENT 422, FAILED_PRECONDITION 400, NOT_FOUND
// 404, UNAUTHENTICATED 401, PERMISSION_DENIED 403, RESOURCE_EXHAUSTED 429,
// DEADLINE_EXCEEDED 504, UNAVAILABLE 503, CANCELLED 499, UNIMPLEMENTED 501,
// anything else 500.
int HttpStatusFor(absl::StatusCode code);
// TEI's error_type of an HTTP status: "validation" (400, 422), "unauthorized",
// "forbidden", "not_found", "payload_too_large", "overloaded" (429),
// "unhealthy" (503), "timeout" (408, 504), "cancelled" (499), "backend".
const char* HttpErrorType(int http_status);

// --------------------------------------------------------- common fields --

// Fields every body may carry beside its shape's own.
struct CallOptions {
  std::optional<absl::Duration> timeout;  // "timeout_ms"
  std::optional<int> priority;            // "priority"
};

// The `request-timeout` header: a number of milliseconds ("250", "1.5") or
// a duration with its unit ("2s", "250ms"); must be > 0.
absl::StatusOr<absl::Duration> ParseRequestTimeout(absl::string_view value);

// -------------------------------------------------------- model choosing --

// The model a TEI route (no model field) serves: `requested` (?model=NAME)
// when given; else `default_model` when it serves `task`; else the only
// served model of `task` ("" = of any task). NOT_FOUND when there is none, INVALID_ARGUMENT
// naming them when several could be meant. `served` is (name, task) pairs.
absl::StatusOr<std::string> ChooseModel(const std::vector<std::pair<std::string, std::string>>& served,
                                        const std::string& requested, const std::string& default_model,
                                        absl::string_view task);

// ------------------------------------------------------------------- TEI --

struct TeiPredict {
  std::unique_ptr<v1::ClassifyRequest> request;  // model left empty
  bool batched = false;  // "inputs" was a list: the response is a list of lists
  CallOptions call;
};
absl::StatusOr<TeiPredict> ParseTeiPredict(absl::string_view body);
// [{"label","score"}...] best first, or a list of those when batched.
std::string TeiPredictResponse(const v1::ClassifyResponse& response, bool batched);

struct TeiRerank {
  std::unique_ptr<v1::RerankRequest> request;  // model left empty
  bool return_text = false;
  CallOptions call;
};
absl::StatusOr<TeiRerank> ParseTeiRerank(absl::string_view body);
// [{"index","score","text"?}...] best first.
std::string TeiRerankResponse(const v1::RerankResponse& response, bool return_text);

struct TeiTokenize {
  std::vector<std::string> inputs;
  bool batched = false;
  bool add_special_tokens = true;
  CallOptions call;
};
absl::StatusOr<TeiTokenize> ParseTeiTokenize(absl::string_view body);
// One token of TEI's /tokenize response; start/stop are UTF-8 byte offsets
// into the input (0, 0 for special tokens).
struct TokenJson {
  int32_t id = 0;
  std::string text;
  bool special = false;
  int64_t start = 0;
  int64_t stop = 0;
};
// Always a list of lists (one per input), as TEI answers.
std::string TeiTokenizeResponse(const std::vector<std::vector<TokenJson>>& tokens);

// ---------------------------------------------------------------- Cohere --

struct CohereRerank {
  std::unique_ptr<v1::RerankRequest> request;
  CallOptions call;
};
absl::StatusOr<CohereRerank> ParseCohereRerank(absl::string_view body);
// {"id": request_id, "results": [{"index", "relevance_score", "document":
// {"text"}?}], "model", "meta": {...}, "usage": {"total_tokens"}} (Cohere's
// v1 shape; Jina's "model" and "usage" too).
std::string CohereRerankResponse(const v1::RerankResponse& response, const std::string& request_id,
                                 bool return_documents);

// ----------------------------------------------------------- HF question --

struct HfAnswer {
  std::unique_ptr<v1::AnswerRequest> request;
  int top_k = 1;                          // parameters.top_k; > 1: a list is returned
  bool handle_impossible_answer = false;  // parameters.handle_impossible_answer
  CallOptions call;
};
// parameters: top_k, max_answer_len (tokens), handle_impossible_answer,
// doc_stride (accepted and ignored: windows use the checkpoint's stride, so
// results equal gRPC's), max_answer_chars and null_score_diff_threshold
// (ours, as in AnswerRequest).
absl::StatusOr<HfAnswer> ParseHfAnswer(absl::string_view body);
// {"answer","score","start","end","no_answer_score"} (start/end: code
// points), or a list of top_k of them. With handle_impossible_answer, the
// empty answer (start = end = 0, score = no_answer_score) is first when the
// model says no answer, else placed by its score; without it, spans only
// (the empty answer when there is none), as Hugging Face does.
std::string HfAnswerResponse(const v1::AnswerResponse& response, const HfAnswer& call);

// ---------------------------------------------------------------- proto3 --

// A v1 message from its proto3 JSON mapping (snake_case or lowerCamelCase
// names; unknown fields refused), after taking out "timeout_ms".
absl::Status ParseProtoJson(absl::string_view body, google::protobuf::Message* message, CallOptions* call);
// The message in proto3 JSON with snake_case names and every field printed
// (zeros and empty lists too, so clients see the whole shape).
std::string ProtoJson(const google::protobuf::Message& message);

}  // namespace dserve
