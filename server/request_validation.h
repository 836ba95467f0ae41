// Request validation: the steps of Classify / Answer / Rerank between the raw
// request bytes and the items queued on a model — parse (naming the field
// that holds invalid UTF-8), check the request limits of ServeOptions, and
// tokenize into one item per text / QA window / rerank chunk.
//
// Pure functions: no gRPC server, no torch, no model. Errors are
// INVALID_ARGUMENT naming the field ("texts[1]", "contexts", "query"...) and,
// for a limit, the limit and its flag. The service calls these on the gRPC
// thread; the fuzzers (tests/fuzz) call them on arbitrary bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dserve/v1/inference.pb.h"
#include "model/tokenizer/tokenizer.h"
#include "server/item_input.h"
#include "server/options.h"

namespace google {
namespace protobuf {
class Message;
}
}  // namespace google

namespace dserve {

// Parses serialized request bytes into a v1::ClassifyRequest, AnswerRequest
// or RerankRequest (the only instantiations). A message protobuf rejects is
// INVALID_ARGUMENT: "texts[1]: invalid UTF-8 at byte 4 (0x80)" when a string
// field holds invalid UTF-8 (found by parsing the bytes mirror of
// server/proto/raw_requests.proto), else "request: not a valid
// dserve.v1.ClassifyRequest".
template <typename Request>
absl::StatusOr<std::unique_ptr<Request>> ParseRequest(absl::string_view bytes);
extern template absl::StatusOr<std::unique_ptr<v1::ClassifyRequest>> ParseRequest(absl::string_view);
extern template absl::StatusOr<std::unique_ptr<v1::AnswerRequest>> ParseRequest(absl::string_view);
extern template absl::StatusOr<std::unique_ptr<v1::RerankRequest>> ParseRequest(absl::string_view);

// The first string field of `raw` (a message of server/proto/raw_requests.proto,
// `bytes` where the API has `string`) that is not valid UTF-8, as
// INVALID_ARGUMENT naming the field, the index and the byte; OK if none.
absl::Status FindInvalidUtf8(const google::protobuf::Message& raw);

// What tokenization needs of the served model.
struct ModelInputSpec {
  const Tokenizer* tokenizer = nullptr;  // not owned
  int max_length = 0;                    // tokens per item, specials included
  int doc_stride = 0;                    // window overlap, tokens (config dserve.qa.doc_stride)
  bool type_ids = false;                 // the model takes token_type_ids (type_vocab_size > 0)
};

// The API's truncation enum; UNSPECIFIED gives `default_value`, values the
// proto does not define are INVALID_ARGUMENT naming the value.
absl::StatusOr<Truncation> ToTruncation(v1::Truncation t, Truncation default_value);

// The cheap checks of each Prepare* below (counts, text sizes, empty texts,
// truncation value), run over the whole request before any text is
// tokenized: the service runs them before it even asks the queue for room,
// and each Prepare* runs them first, so a bad last text never costs the
// tokenization of the texts before it.
absl::Status CheckClassifyLimits(const v1::ClassifyRequest& request, const ServeOptions& limits);
absl::Status CheckAnswerLimits(const v1::AnswerRequest& request, const ServeOptions& limits);
absl::Status CheckRerankLimits(const v1::RerankRequest& request, const ServeOptions& limits);

// Classify: one item per text, in order.
struct PreparedClassify {
  std::vector<ItemInput> inputs;
  std::vector<bool> truncated;   // the text lost tokens to truncation
  std::vector<uint32_t> tokens;  // tokens of the item, specials included
};
// Checks: texts 1..max_texts_per_request; each text non-empty and at most
// max_text_bytes; text_pairs none or one per text (each like a text; then
// items are the pairs, with token_type_ids when the model takes them);
// truncation and truncation_direction known (UNSPECIFIED = longest_first;
// LEFT keeps the ends of the texts, as many tokens of each as RIGHT keeps);
// each item encodes within max_length.
absl::StatusOr<PreparedClassify> PrepareClassify(const v1::ClassifyRequest& request, const ServeOptions& limits,
                                                 const ModelInputSpec& model);

// Answer: the windows of every context, context by context.
struct PreparedAnswer {
  std::vector<ItemInput> inputs;
  std::vector<Window> windows;           // inputs[i] came from windows[i]
  std::vector<uint32_t> window_context;  // index of windows[i]'s context
};
// Checks: question non-empty and at most max_text_bytes; contexts
// 1..max_contexts_per_request, each non-empty and at most max_text_bytes;
// the question leaves room for context tokens within max_length; the
// windows of all contexts together at most max_windows_per_request
// (counted before any window is built).
absl::StatusOr<PreparedAnswer> PrepareAnswer(const v1::AnswerRequest& request, const ServeOptions& limits,
                                             const ModelInputSpec& model);

// Rerank: the chunks of every document (one per document unless the
// truncation is UNSPECIFIED, which windows long documents).
struct PreparedRerank {
  std::vector<ItemInput> inputs;
  std::vector<uint32_t> chunk_document;  // index of inputs[i]'s document
  std::vector<ByteSpan> chunk_bytes;     // bytes of that document inputs[i] covers
};
// Checks: query non-empty and at most max_text_bytes; documents
// 1..max_documents_per_request, each non-empty and at most max_text_bytes;
// truncation and truncation_direction known; each (query, document) fits
// max_length as the truncation asks (LEFT drops the first tokens); when
// chunking, the first max_chunks_per_document chunks of each document (all
// when 0), and the chunks of all documents together at most
// max_windows_per_request (counted before any chunk is built).
absl::StatusOr<PreparedRerank> PrepareRerank(const v1::RerankRequest& request, const ServeOptions& limits,
                                             const ModelInputSpec& model);

}  // namespace dserve
