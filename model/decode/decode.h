// Decode step of the task pipelines: turns model outputs (logits) into the
// values the wire contract reports (proto/dserve/v1/inference.proto). Lives
// in model/ (not server/, where DESIGN first placed the pipelines) because
// `dserve eval` post-processes exactly as the server does.
//
//   DecodeClassification  one row of classifier logits -> sorted label scores
//   DecodeAnswer          start/end logits of the windows of one question
//                         over one or more contexts -> SQuAD v2 answers
//   DecodeRerank          per-chunk relevance logits -> sorted documents
//   CodepointTable        UTF-8 byte offsets -> Unicode code-point offsets
//
// Everything here is pure (no torch, no gRPC, no I/O, no shared state) and
// thread-safe. Scores are probabilities unless raw scores are asked for;
// lists are sorted by score, highest first, ties broken by the lower id or
// index, so results are deterministic.
//
// Errors: the functions return InvalidArgument when their inputs break the
// documented contract (shape mismatch, index out of range, non-finite logit,
// non-positive temperature). Such inputs come from a pipeline bug or a model
// that produced NaN/Inf, never from a client, so the service should log them
// and answer INTERNAL rather than forward the code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/tokenizer.h"  // ByteSpan

namespace dserve {

// ---------------------------------------------------------------------------
// Numerics (double precision, stable for any finite input).

// softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x). Empty in, empty out.
std::vector<double> Softmax(absl::Span<const double> x);
// 1 / (1 + exp(-x)), evaluated without overflow for large |x|.
double Sigmoid(double x);

// ---------------------------------------------------------------------------
// Code points.

// Half-open range [begin, end) of Unicode code points.
struct CodepointSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool operator==(const CodepointSpan& o) const { return begin == o.begin && end == o.end; }
};

// Byte-offset -> code-point-offset table for one UTF-8 text. Built once in
// O(bytes) (4 bytes of memory per text byte); each lookup is O(1), so it
// serves any number of spans of the same text. Does NOT own the text: the
// text must outlive the table. Meant for valid UTF-8 (the service validates
// requests); on invalid input it stays memory-safe but the numbers are only
// approximate.
class CodepointTable {
 public:
  explicit CodepointTable(absl::string_view text);

  // Code points in the text.
  uint32_t num_codepoints() const { return leads_before_.back(); }
  size_t num_bytes() const { return text_.size(); }
  // Index of the code point that contains byte `byte_offset` (for an offset
  // on a character boundary: the character starting there; for
  // `byte_offset == num_bytes()`: num_codepoints()). Requires
  // byte_offset <= num_bytes().
  uint32_t FloorCodepoint(size_t byte_offset) const;
  // Code-point offset of the first character boundary at or after
  // `byte_offset`. Equal to FloorCodepoint on boundaries.
  uint32_t CeilCodepoint(size_t byte_offset) const;
  // The code-point range covering the bytes of `span`: begin rounded down,
  // end rounded up to character boundaries (identity on boundary-aligned
  // spans, which is what the tokenizer produces). Requires
  // span.begin <= span.end <= num_bytes().
  CodepointSpan ToCodepoints(ByteSpan span) const;
  // The bytes of `span` widened to character boundaries, the same way as
  // ToCodepoints, so that Slice(span) is exactly the code-point range
  // ToCodepoints(span) of the text.
  absl::string_view Slice(ByteSpan span) const;

 private:
  bool IsBoundary(size_t byte_offset) const;

  absl::string_view text_;
  // leads_before_[b] = number of code-point lead bytes in text[0, b);
  // size num_bytes() + 1.
  std::vector<uint32_t> leads_before_;
};

// ---------------------------------------------------------------------------
// Classification.

enum class ProblemType {
  kSingleLabel,  // softmax over the labels (a 1-label model: sigmoid)
  kMultiLabel,   // independent sigmoid per label
};

// Hugging Face config.json `problem_type`: "" and
// "single_label_classification" -> kSingleLabel,
// "multi_label_classification" -> kMultiLabel; anything else (including
// "regression") -> InvalidArgument naming the value.
absl::StatusOr<ProblemType> ParseProblemType(absl::string_view problem_type);

struct ClassifyDecodeOptions {
  ProblemType problem_type = ProblemType::kSingleLabel;
  // Calibration temperature: logits are divided by it before anything else.
  // Must be finite and > 0. Default 1 (uncalibrated).
  double temperature = 1.0;
  // Labels returned, best first; 0 = all.
  uint32_t top_k = 0;
  // Report logit / temperature instead of a probability.
  bool raw_scores = false;
};

struct ScoredLabel {
  int32_t label_id = 0;  // index into the model's labels (id2label order)
  std::string label;
  float score = 0.0f;  // probability, or logit / temperature with raw_scores
};

// One text's classifier logits (one per label, `labels` in id order) ->
// min(top_k, labels) labels sorted by score descending (the reported score,
// i.e. after the float conversion), ties by label id ascending.
// Probabilities: kSingleLabel with >= 2 labels: softmax; kSingleLabel with 1
// label and kMultiLabel: sigmoid of each logit. Errors: empty logits,
// logits.size() != labels.size(), a non-finite logit, temperature not > 0.
absl::StatusOr<std::vector<ScoredLabel>> DecodeClassification(
    absl::Span<const float> logits, absl::Span<const std::string> labels,
    const ClassifyDecodeOptions& options);

// ---------------------------------------------------------------------------
// Extractive question answering (SQuAD v2 post-processing).

// One window (feature) of one context: [CLS] question [SEP] context-part [SEP].
// The spans are views; the caller keeps the data alive during DecodeAnswer.
struct QaWindow {
  // Logits over the window's n tokens (padding excluded); token 0 is [CLS],
  // whose start + end logits are this window's null score.
  absl::Span<const float> start_logits;
  absl::Span<const float> end_logits;
  // n entries: the token's UTF-8 byte range in contexts[context_index], or
  // nullopt for question and special tokens (Window::second_offsets).
  absl::Span<const std::optional<ByteSpan>> offsets;
  // Which context this window belongs to.
  uint32_t context_index = 0;
};

struct QaDecodeOptions {
  // Start and end indices considered per window, and length of the n-best
  // list. Hugging Face default 20. Must be >= 1.
  uint32_t n_best = 20;
  // Longest span in tokens (end - start + 1). HF max_answer_length, 30.
  // Must be >= 1.
  uint32_t max_answer_tokens = 30;
  // Longest span in code points; 0 = no limit. Our addition to HF: spans
  // longer than this are dropped with the other invalid candidates.
  uint32_t max_answer_chars = 0;
  // no_answer when null_score - best_span_score > this (logits). HF 0.0.
  float null_score_diff_threshold = 0.0f;
  // Answers returned; 0 means 1. At most the non-null spans of the n-best
  // list are returned.
  uint32_t top_k = 1;
};

// A member of the n-best list.
struct QaCandidate {
  bool is_null = false;  // the null ("no answer") candidate
  // For spans: where the span comes from (unset for the null candidate).
  uint32_t context_index = 0;
  uint32_t window_index = 0;  // index into the `windows` argument
  uint32_t start_token = 0;   // token indices in that window, inclusive
  uint32_t end_token = 0;
  ByteSpan bytes;             // [start.begin, end.end) in the context
  CodepointSpan chars;        // the same range in code points
  float start_logit = 0.0f;   // for the null candidate: of the min-null window
  float end_logit = 0.0f;
  float logit_score = 0.0f;   // start_logit + end_logit (float, as HF)
  float probability = 0.0f;   // softmax over the n-best list's logit scores
};

struct QaAnswer {
  std::string text;  // == contexts[context_index] code points [start_char, end_char)
  uint32_t context_index = 0;
  uint32_t start_char = 0;  // code-point offsets, end exclusive
  uint32_t end_char = 0;
  float score = 0.0f;        // the candidate's n-best probability
  float logit_score = 0.0f;  // start_logit + end_logit
};

struct QaDecodeResult {
  // Up to top_k spans, best first (filled even when no_answer is set so
  // callers can inspect the runner-up).
  std::vector<QaAnswer> answers;
  bool no_answer = true;
  // Probability of the null candidate in the n-best softmax.
  float no_answer_score = 1.0f;
  // null_score - best span's (start_logit + end_logit), as compared with the
  // threshold; +infinity when the n-best list has no span with text.
  float null_score_diff = 0.0f;
  // The example's null score: min over windows of start[0] + end[0].
  float null_score = 0.0f;
  // The n-best list (null included), sorted by logit_score descending, for
  // debugging and eval tooling.
  std::vector<QaCandidate> n_best;
};

// Hugging Face `postprocess_qa_predictions(version_2_with_negative=True)`
// (run_qa.py / utils_qa.py) for one question whose contexts were windowed;
// every window of every context is a feature of the same example.
//
//  1. null = min over windows of start[0] + end[0].
//  2. Per window, the top-n_best start and end indices (by logit descending;
//     ties by lower index) are paired. A pair is dropped when an offset is
//     nullopt, end < start, end - start + 1 > max_answer_tokens, or (ours)
//     its code-point length exceeds max_answer_chars. score = start + end
//     logits; the span is [offset[start].begin, offset[end].end).
//  3. The null candidate is added after all spans; the list is stably sorted
//     by score descending (ties keep generation order: windows in order,
//     start indices then end indices by logit), cut to n_best, and the null
//     candidate is re-added at the end if it fell out. Probabilities are the
//     softmax of the kept scores.
//  4. best = the first span in the list with non-empty text (HF skips empty
//     text); null_score_diff = null - best.start_logit - best.end_logit
//     (float, as HF); no_answer = no such span, or diff > threshold.
//  5. answers = the non-null, non-empty spans of the list in order, with
//     surrounding whitespace trimmed (a "▁word" piece's offsets cover the
//     space before it), deduplicated by (context_index, start_char,
//     end_char) keeping the first (best), cut to top_k.
//
// Departures from HF, all outside its defined behaviour or beyond it:
//  - Deduplication in step 5 (ours): overlapping windows see the same span
//    twice; HF never returns more than one answer so it does not dedup. The
//    n-best list and its probabilities are HF's (duplicates included).
//  - When the kept list holds no span with text, HF inserts a placeholder
//    "empty" prediction with score 0 (or raises IndexError); we report
//    no_answer with null_score_diff = +inf and no placeholder, so the
//    probabilities are those of the real list (no_answer_score = 1 when the
//    null is alone).
//  - HF recognises the null candidate by offsets (0, 0); we flag it, so a
//    real empty span at byte 0 is not mistaken for it.
//  - max_answer_chars (step 2) and the whitespace trim (step 5) are ours;
//    the n-best list keeps HF's untrimmed spans.
//
// `contexts` are the request's texts (valid UTF-8; byte offsets index them).
// Text and code-point offsets of a span are derived from its byte range
// through CodepointTable (boundary-aligned ranges are used as they are).
// Errors (InvalidArgument): no windows, a window with no tokens or logits /
// offsets of different lengths, context_index out of range, an offset past
// the end of its context or with begin > end, a non-finite logit, n_best or
// max_answer_tokens of 0.
absl::StatusOr<QaDecodeResult> DecodeAnswer(absl::Span<const QaWindow> windows,
                                            absl::Span<const absl::string_view> contexts,
                                            const QaDecodeOptions& options);

// ---------------------------------------------------------------------------
// Reranking.

struct RerankDecodeOptions {
  // Documents returned, best first; 0 = all.
  uint32_t top_n = 0;
  // Report logit / temperature instead of sigmoid(logit / temperature).
  bool raw_scores = false;
  // Calibration temperature (finite, > 0); default 1 = uncalibrated.
  double temperature = 1.0;
};

struct RankedResult {
  uint32_t index = 0;       // document index in the request
  uint32_t best_chunk = 0;  // index of the chunk with the highest logit (first on ties)
  float logit = 0.0f;       // that chunk's logit
  float score = 0.0f;       // sigmoid(logit / T), or logit / T with raw_scores
};

// chunk_logits[d] = the relevance logits of document d's chunks (>= 1 each).
// Document score = max over its chunks (max pooling; sigmoid is monotone so
// pooling logits or probabilities is the same). Returns min(top_n, docs)
// results sorted by score descending (the reported float), ties by index
// ascending. Errors: a document without chunks, a non-finite logit,
// temperature not > 0.
absl::StatusOr<std::vector<RankedResult>> DecodeRerank(
    absl::Span<const std::vector<float>> chunk_logits, const RerankDecodeOptions& options);

}  // namespace dserve
