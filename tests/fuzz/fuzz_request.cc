// libFuzzer targets fuzz_request_classify / _answer / _rerank: the bytes of
// a serialized request (what gRPC hands the service) through the service's
// own parse, limit checks and tokenization (server/request_validation.h),
// with the fixed real tokenizer. Errors must be INVALID_ARGUMENT; accepted
// requests must give items within max_length that match the request.
//
// DSERVE_FUZZ_RPC picks the RPC: 0 Classify, 1 Answer, 2 Rerank.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/request_validation.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/tokenizer_checks.h"

namespace dserve {
namespace {

// Small limits, so that inputs of a few KB reach every limit.
ServeOptions Limits() {
  ServeOptions limits;
  limits.max_texts_per_request = 8;
  limits.max_documents_per_request = 8;
  limits.max_contexts_per_request = 4;
  limits.max_text_bytes = 512;
  return limits;
}

// The served test models' settings (tests/data/make_test_models.py):
// classify 256 tokens, answer and rerank 128 with doc_stride 128 (clamped),
// token types for answer only. Smaller lengths give more windows per KB.
ModelInputSpec Spec(int max_length, bool type_ids) {
  ModelInputSpec spec;
  spec.tokenizer = &fuzz::FixedTokenizer();
  spec.max_length = max_length;
  spec.doc_stride = 128;
  spec.type_ids = type_ids;
  return spec;
}

void CheckError(const absl::Status& s) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s", s.ToString().c_str());
  FUZZ_CHECK(!s.message().empty(), "error without a message");
}

void CheckItem(const ItemInput& item, const ModelInputSpec& spec) {
  FUZZ_CHECK(!item.ids.empty() && item.ids.size() <= static_cast<size_t>(spec.max_length), "item of %zu tokens",
             item.ids.size());
  FUZZ_CHECK(spec.type_ids ? item.type_ids.size() == item.ids.size() : item.type_ids.empty(), "%zu type ids",
             item.type_ids.size());
  for (int64_t id : item.ids) {
    FUZZ_CHECK(id >= 0 && id < spec.tokenizer->vocab_size(), "id %lld", static_cast<long long>(id));
  }
}

template <typename Request>
const Request* Parse(std::string_view bytes, std::unique_ptr<Request>* holder) {
  auto parsed = ParseRequest<Request>(absl::string_view(bytes.data(), bytes.size()));
  if (!parsed.ok()) {
    CheckError(parsed.status());
    return nullptr;
  }
  *holder = *std::move(parsed);
  return holder->get();
}

void Classify(std::string_view bytes) {
  std::unique_ptr<v1::ClassifyRequest> holder;
  const v1::ClassifyRequest* request = Parse(bytes, &holder);
  if (request == nullptr) return;
  const ModelInputSpec spec = Spec(64, false);
  auto prepared = PrepareClassify(*request, Limits(), spec);
  if (!prepared.ok()) return CheckError(prepared.status());
  const size_t n = static_cast<size_t>(request->texts_size());
  FUZZ_CHECK(prepared->inputs.size() == n && prepared->truncated.size() == n && prepared->tokens.size() == n,
             "%zu texts, %zu items", n, prepared->inputs.size());
  for (size_t i = 0; i < n; ++i) {
    CheckItem(prepared->inputs[i], spec);
    FUZZ_CHECK(prepared->tokens[i] == prepared->inputs[i].ids.size(), "tokens[%zu]", i);
  }
}

void Answer(std::string_view bytes) {
  std::unique_ptr<v1::AnswerRequest> holder;
  const v1::AnswerRequest* request = Parse(bytes, &holder);
  if (request == nullptr) return;
  const ModelInputSpec spec = Spec(48, true);
  auto prepared = PrepareAnswer(*request, Limits(), spec);
  if (!prepared.ok()) return CheckError(prepared.status());
  const size_t n = prepared->inputs.size();
  FUZZ_CHECK(prepared->windows.size() == n && prepared->window_context.size() == n, "ragged: %zu items", n);
  uint32_t context = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= n; ++i) {
    if (i == n || prepared->window_context[i] != context) {
      // Windows of one context, in order.
      FUZZ_CHECK(i > begin, "context %u has no window", context);
      std::vector<Window> windows(prepared->windows.begin() + begin, prepared->windows.begin() + i);
      fuzz::CheckWindows(*spec.tokenizer, windows, request->contexts(static_cast<int>(context)), spec.max_length);
      if (i == n) break;
      FUZZ_CHECK(prepared->window_context[i] == context + 1, "contexts out of order");
      ++context;
      begin = i;
    }
    CheckItem(prepared->inputs[i], spec);
    FUZZ_CHECK(prepared->inputs[i].ids.size() == prepared->windows[i].ids.size(), "item %zu is not its window", i);
  }
  FUZZ_CHECK(static_cast<int>(context) + 1 == request->contexts_size(), "%u of %d contexts", context + 1,
             request->contexts_size());
}

void Rerank(std::string_view bytes) {
  std::unique_ptr<v1::RerankRequest> holder;
  const v1::RerankRequest* request = Parse(bytes, &holder);
  if (request == nullptr) return;
  const ModelInputSpec spec = Spec(48, false);
  auto prepared = PrepareRerank(*request, Limits(), spec);
  if (!prepared.ok()) return CheckError(prepared.status());
  const size_t n = prepared->inputs.size();
  FUZZ_CHECK(prepared->chunk_document.size() == n && prepared->chunk_bytes.size() == n, "ragged: %zu items", n);
  FUZZ_CHECK(n >= static_cast<size_t>(request->documents_size()), "%zu chunks for %d documents", n,
             request->documents_size());
  for (size_t i = 0; i < n; ++i) {
    CheckItem(prepared->inputs[i], spec);
    const uint32_t d = prepared->chunk_document[i];
    FUZZ_CHECK(d < static_cast<uint32_t>(request->documents_size()), "chunk %zu of document %u", i, d);
    FUZZ_CHECK(i == 0 || d == prepared->chunk_document[i - 1] || d == prepared->chunk_document[i - 1] + 1,
               "documents out of order at chunk %zu", i);
    const ByteSpan bytes_span = prepared->chunk_bytes[i];
    FUZZ_CHECK(bytes_span.begin <= bytes_span.end && bytes_span.end <= request->documents(static_cast<int>(d)).size(),
               "chunk %zu covers [%u, %u) of %zu bytes", i, bytes_span.begin, bytes_span.end,
               request->documents(static_cast<int>(d)).size());
  }
}

}  // namespace
}  // namespace dserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dserve::fuzz::QuietLogs();
  (void)dserve::fuzz::FixedTokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
#if DSERVE_FUZZ_RPC == 0
  dserve::Classify(bytes);
#elif DSERVE_FUZZ_RPC == 1
  dserve::Answer(bytes);
#elif DSERVE_FUZZ_RPC == 2
  dserve::Rerank(bytes);
#else
#error "DSERVE_FUZZ_RPC must be 0 (Classify), 1 (Answer) or 2 (Rerank)"
#endif
  return 0;
}
