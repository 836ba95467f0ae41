#include "model/decode/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dserve {
namespace {

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

absl::Status CheckFinite(absl::Span<const float> values, absl::string_view what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("non-finite ", what, " at index ", i, ": ", values[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTemperature(double temperature) {
  if (!std::isfinite(temperature) || temperature <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and > 0, got ", temperature));
  }
  return absl::OkStatus();
}

// Number of results to return for a `limit` where 0 means all.
size_t Limit(size_t available, uint32_t limit) {
  return limit == 0 ? available : std::min<size_t>(available, limit);
}

}  // namespace

// ---------------------------------------------------------------------------
// Numerics.

std::vector<double> Softmax(absl::Span<const double> x) {
  std::vector<double> out(x.size());
  if (x.empty()) return out;
  const double max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  for (double& v : out) v /= sum;
  return out;
}

double Sigmoid(double x) {
  // Only ever exponentiate a non-positive number.
  if (x >= 0.0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// ---------------------------------------------------------------------------
// CodepointTable.

CodepointTable::CodepointTable(absl::string_view text)
    : text_(text), leads_before_(text.size() + 1) {
  uint32_t leads = 0;
  for (size_t b = 0; b < text.size(); ++b) {
    leads_before_[b] = leads;
    if (!IsContinuationByte(text[b])) ++leads;
  }
  leads_before_[text.size()] = leads;
}

bool CodepointTable::IsBoundary(size_t byte_offset) const {
  return byte_offset >= text_.size() || !IsContinuationByte(text_[byte_offset]);
}

uint32_t CodepointTable::FloorCodepoint(size_t byte_offset) const {
  const uint32_t leads = leads_before_[byte_offset];
  // Inside a character, its lead byte is already counted.
  if (IsBoundary(byte_offset) || leads == 0) return leads;
  return leads - 1;
}

uint32_t CodepointTable::CeilCodepoint(size_t byte_offset) const {
  return leads_before_[byte_offset];
}

CodepointSpan CodepointTable::ToCodepoints(ByteSpan span) const {
  return CodepointSpan{FloorCodepoint(span.begin), CeilCodepoint(span.end)};
}

absl::string_view CodepointTable::Slice(ByteSpan span) const {
  size_t begin = span.begin;
  size_t end = span.end;
  while (begin > 0 && !IsBoundary(begin)) --begin;
  while (end < text_.size() && !IsBoundary(end)) ++end;
  return text_.substr(begin, end - begin);
}

// ---------------------------------------------------------------------------
// Classification.

absl::StatusOr<ProblemType> ParseProblemType(absl::string_view problem_type) {
  if (problem_type.empty() || problem_type == "single_label_classification") {
    return ProblemType::kSingleLabel;
  }
  if (problem_type == "multi_label_classification") return ProblemType::kMultiLabel;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported problem_type \"", problem_type,
                   "\" (expected \"\", \"single_label_classification\" or "
                   "\"multi_label_classification\")"));
}

absl::StatusOr<std::vector<ScoredLabel>> DecodeClassification(
    absl::Span<const float> logits, absl::Span<const std::string> labels,
    const ClassifyDecodeOptions& options) {
  if (logits.empty() || logits.size() != labels.size()) {
    return absl::InvalidArgumentError(absl::StrCat("classifier logits: got ", logits.size(),
                                                   " values for ", labels.size(), " labels"));
  }
  if (absl::Status s = CheckFinite(logits, "classifier logit"); !s.ok()) return s;
  if (absl::Status s = CheckTemperature(options.temperature); !s.ok()) return s;

  std::vector<double> scaled(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scaled[i] = logits[i] / options.temperature;

  std::vector<double> scores;
  if (options.raw_scores) {
    scores = scaled;
  } else if (options.problem_type == ProblemType::kSingleLabel && logits.size() > 1) {
    scores = Softmax(scaled);
  } else {
    scores.resize(scaled.size());
    for (size_t i = 0; i < scaled.size(); ++i) scores[i] = Sigmoid(scaled[i]);
  }

  std::vector<ScoredLabel> out(logits.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].label_id = static_cast<int32_t>(i);
    out[i].label = labels[i];
    out[i].score = static_cast<float>(scores[i]);
  }
  std::sort(out.begin(), out.end(), [](const ScoredLabel& a, const ScoredLabel& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.label_id < b.label_id;
  });
  out.resize(Limit(out.size(), options.top_k));
  return out;
}

// ---------------------------------------------------------------------------
// Question answering.

namespace {

absl::Status ValidateWindow(const QaWindow& w, size_t index,
                            absl::Span<const absl::string_view> contexts) {
  const size_t n = w.start_logits.size();
  if (n == 0 || w.end_logits.size() != n || w.offsets.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QA window ", index, ": start/end logits and offsets must have the same non-zero length (",
        n, ", ", w.end_logits.size(), ", ", w.offsets.size(), ")"));
  }
  if (w.context_index >= contexts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("QA window ", index, ": context_index ",
                                                   w.context_index, " out of range (",
                                                   contexts.size(), " contexts)"));
  }
  const size_t context_bytes = contexts[w.context_index].size();
  for (size_t t = 0; t < n; ++t) {
    const std::optional<ByteSpan>& off = w.offsets[t];
    if (off.has_value() && (off->begin > off->end || off->end > context_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("QA window ", index, " token ", t, ": byte offsets [", off->begin, ", ",
                       off->end, ") outside context of ", context_bytes, " bytes"));
    }
  }
  if (absl::Status s = CheckFinite(w.start_logits, "start logit"); !s.ok()) return s;
  return CheckFinite(w.end_logits, "end logit");
}

// Indices of the `k` largest values, by value descending, ties by index.
std::vector<uint32_t> TopIndices(absl::Span<const float> values, uint32_t k) {
  std::vector<uint32_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const size_t keep = std::min<size_t>(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](uint32_t a, uint32_t b) {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  });
  idx.resize(keep);
  return idx;
}

// Lazily built code-point tables, one per context.
class ContextTables {
 public:
  explicit ContextTables(absl::Span<const absl::string_view> contexts)
      : contexts_(contexts), tables_(contexts.size()) {}
  const CodepointTable& Get(uint32_t context_index) {
    std::optional<CodepointTable>& t = tables_[context_index];
    if (!t.has_value()) t.emplace(contexts_[context_index]);
    return *t;
  }

 private:
  absl::Span<const absl::string_view> contexts_;
  std::vector<std::optional<CodepointTable>> tables_;
};

// Appends the valid (start, end) pairs of window `wi` to `out` (step 2).
void AppendWindowSpans(const QaWindow& w, uint32_t wi, const QaDecodeOptions& options,
                       ContextTables* tables, std::vector<QaCandidate>* out) {
  const std::vector<uint32_t> starts = TopIndices(w.start_logits, options.n_best);
  const std::vector<uint32_t> ends = TopIndices(w.end_logits, options.n_best);
  for (uint32_t s : starts) {
    if (!w.offsets[s].has_value()) continue;
    for (uint32_t e : ends) {
      if (!w.offsets[e].has_value() || e < s || e - s + 1 > options.max_answer_tokens) continue;
      QaCandidate c;
      c.context_index = w.context_index;
      c.window_index = wi;
      c.start_token = s;
      c.end_token = e;
      // Offsets need not be monotone in principle; an inverted range is an
      // empty span at its start, which is skipped as empty text later.
      c.bytes = ByteSpan{w.offsets[s]->begin, std::max(w.offsets[s]->begin, w.offsets[e]->end)};
      c.chars = tables->Get(w.context_index).ToCodepoints(c.bytes);
      if (options.max_answer_chars > 0 && c.chars.end - c.chars.begin > options.max_answer_chars) {
        continue;
      }
      c.start_logit = w.start_logits[s];
      c.end_logit = w.end_logits[e];
      c.logit_score = c.start_logit + c.end_logit;
      out->push_back(c);
    }
  }
}

// The candidate of the window with the smallest null score (the first on ties).
QaCandidate MinNullCandidate(absl::Span<const QaWindow> windows) {
  QaCandidate null;
  null.is_null = true;
  for (size_t i = 0; i < windows.size(); ++i) {
    const float score = windows[i].start_logits[0] + windows[i].end_logits[0];
    if (i == 0 || score < null.logit_score) {
      null.start_logit = windows[i].start_logits[0];
      null.end_logit = windows[i].end_logits[0];
      null.logit_score = score;
    }
  }
  return null;
}

// Step 3: sort, cut to n_best, re-add the null, attach probabilities.
std::vector<QaCandidate> NBest(std::vector<QaCandidate> candidates, const QaCandidate& null,
                               uint32_t n_best) {
  candidates.push_back(null);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const QaCandidate& a, const QaCandidate& b) {
                     return a.logit_score > b.logit_score;
                   });
  if (candidates.size() > n_best) candidates.resize(n_best);
  if (std::none_of(candidates.begin(), candidates.end(),
                   [](const QaCandidate& c) { return c.is_null; })) {
    candidates.push_back(null);
  }
  std::vector<double> scores(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) scores[i] = candidates[i].logit_score;
  const std::vector<double> probs = Softmax(scores);
  for (size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].probability = static_cast<float>(probs[i]);
  }
  return candidates;
}

bool IsAnswerSpan(const QaCandidate& c) { return !c.is_null && c.bytes.end > c.bytes.begin; }

// The span without the whitespace SentencePiece pieces carry ("▁word"
// covers the space before the word): users get "word", not " word".
ByteSpan TrimWhitespace(absl::string_view context, ByteSpan span) {
  auto space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; };
  while (span.begin < span.end && space(context[span.begin])) ++span.begin;
  while (span.end > span.begin && space(context[span.end - 1])) --span.end;
  return span;
}

// Step 5.
std::vector<QaAnswer> CollectAnswers(absl::Span<const QaCandidate> n_best, uint32_t top_k,
                                     absl::Span<const absl::string_view> contexts, ContextTables* tables) {
  std::vector<QaAnswer> answers;
  const size_t want = top_k == 0 ? 1 : top_k;
  for (const QaCandidate& c : n_best) {
    if (answers.size() >= want) break;
    if (!IsAnswerSpan(c)) continue;
    const ByteSpan bytes = TrimWhitespace(contexts[c.context_index], c.bytes);
    if (bytes.end == bytes.begin) continue;
    const CodepointTable& table = tables->Get(c.context_index);
    const CodepointSpan chars = table.ToCodepoints(bytes);
    const bool seen = std::any_of(answers.begin(), answers.end(), [&](const QaAnswer& a) {
      return a.context_index == c.context_index && a.start_char == chars.begin && a.end_char == chars.end;
    });
    if (seen) continue;
    QaAnswer a;
    a.text = std::string(table.Slice(bytes));
    a.context_index = c.context_index;
    a.start_char = chars.begin;
    a.end_char = chars.end;
    a.score = c.probability;
    a.logit_score = c.logit_score;
    answers.push_back(std::move(a));
  }
  return answers;
}

}  // namespace

absl::StatusOr<QaDecodeResult> DecodeAnswer(absl::Span<const QaWindow> windows,
                                            absl::Span<const absl::string_view> contexts,
                                            const QaDecodeOptions& options) {
  if (windows.empty()) return absl::InvalidArgumentError("QA decode: no windows");
  if (options.n_best == 0 || options.max_answer_tokens == 0) {
    return absl::InvalidArgumentError(absl::StrCat("QA decode: n_best (", options.n_best,
                                                   ") and max_answer_tokens (",
                                                   options.max_answer_tokens, ") must be >= 1"));
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    if (absl::Status s = ValidateWindow(windows[i], i, contexts); !s.ok()) return s;
  }

  ContextTables tables(contexts);
  std::vector<QaCandidate> spans;
  for (size_t i = 0; i < windows.size(); ++i) {
    AppendWindowSpans(windows[i], static_cast<uint32_t>(i), options, &tables, &spans);
  }
  const QaCandidate null = MinNullCandidate(windows);

  QaDecodeResult result;
  result.null_score = null.logit_score;
  result.n_best = NBest(std::move(spans), null, options.n_best);
  for (const QaCandidate& c : result.n_best) {
    if (c.is_null) result.no_answer_score = c.probability;
  }
  const auto best = std::find_if(result.n_best.begin(), result.n_best.end(), IsAnswerSpan);
  if (best == result.n_best.end()) {
    result.no_answer = true;
    result.null_score_diff = std::numeric_limits<float>::infinity();
  } else {
    // Same float operations as HF: null - start_logit - end_logit.
    result.null_score_diff = null.logit_score - best->start_logit - best->end_logit;
    result.no_answer = result.null_score_diff > options.null_score_diff_threshold;
  }
  result.answers = CollectAnswers(result.n_best, options.top_k, contexts, &tables);
  return result;
}

// ---------------------------------------------------------------------------
// Reranking.

absl::StatusOr<std::vector<RankedResult>> DecodeRerank(
    absl::Span<const std::vector<float>> chunk_logits, const RerankDecodeOptions& options) {
  if (absl::Status s = CheckTemperature(options.temperature); !s.ok()) return s;
  std::vector<RankedResult> out(chunk_logits.size());
  for (size_t d = 0; d < chunk_logits.size(); ++d) {
    const std::vector<float>& chunks = chunk_logits[d];
    if (chunks.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("rerank: document ", d, " has no chunks"));
    }
    if (absl::Status s = CheckFinite(chunks, absl::StrCat("rerank logit of document ", d));
        !s.ok()) {
      return s;
    }
    RankedResult& r = out[d];
    r.index = static_cast<uint32_t>(d);
    r.best_chunk = static_cast<uint32_t>(std::max_element(chunks.begin(), chunks.end()) -
                                         chunks.begin());  // first of equal maxima
    r.logit = chunks[r.best_chunk];
    const double scaled = r.logit / options.temperature;
    r.score = static_cast<float>(options.raw_scores ? scaled : Sigmoid(scaled));
  }
  std::sort(out.begin(), out.end(), [](const RankedResult& a, const RankedResult& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.index < b.index;
  });
  out.resize(Limit(out.size(), options.top_n));
  return out;
}

}  // namespace dserve
