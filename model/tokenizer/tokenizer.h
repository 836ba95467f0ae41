// Model-level tokenizer: SentencePiece Unigram encoding plus the special
// tokens, pair layout, truncation and sliding windows that DeBERTa-v2/v3
// and ALBERT models expect (Hugging Face DebertaV2Tokenizer(Fast) and
// AlbertTokenizer conventions), or GPT-2 byte-level BPE (bpe.h; DeBERTa
// v1's DebertaTokenizer) under the same layout, truncation and windows.
// Optional text rules (text_rules.h) run
// around SentencePiece in every Encode*/Plan* method; without them (the
// default, DeBERTa) the text goes to SentencePiece as it is. The special
// pieces are looked up by name: [CLS]/[SEP] (else the model's bos/eos),
// [PAD] (else its pad piece), [MASK], and the model's unknown piece.
//
// Layout: single text  [CLS] a [SEP]            token_type_ids 0...0
//         pair         [CLS] a [SEP] b [SEP]    0 for [CLS] a [SEP], 1 for b [SEP]
//
// Units: lengths are in tokens and include the special tokens; offsets are
// UTF-8 byte offsets [begin, end) into the ORIGINAL text of the token's own
// segment (the first text for sequence 0, the second for sequence 1), as
// libsentencepiece reports them (with text rules: as text_rules.h
// describes); special tokens get {0, 0}. Use CodepointIndex (utf8.h) to turn
// them into Unicode code-point offsets.
//
// Ownership and threading: a Tokenizer is immutable after creation; every
// method is const and safe to call from many threads at once. Share one
// instance (e.g. std::shared_ptr<const Tokenizer>) per model.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/spm_processor.h"
#include "model/tokenizer/text_rules.h"

namespace dserve {

struct ByteSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool operator==(const ByteSpan& o) const { return begin == o.begin && end == o.end; }
};

enum class Truncation {
  kNone,          // too long -> InvalidArgument naming the length and the limit
  kLongestFirst,  // trim the longer text first (HF tokenizers' algorithm)
  kOnlyFirst,     // trim only the first text
  kOnlySecond,    // trim only the second text (a single text that is too
                  // long is an error)
};
// kOnlyFirst/kOnlySecond fail (InvalidArgument) when the chosen text would
// have to lose all its tokens, as Hugging Face tokenizers do.

// "none" | "longest_first" | "only_first" | "only_second".
absl::StatusOr<Truncation> ParseTruncation(std::string_view name);

struct EncodeOptions {
  // Maximum number of tokens, specials included; 0 means no limit.
  int max_length = 512;
  Truncation truncation = Truncation::kNone;
  // Also fill Encoding::pieces (costs one string per token).
  bool return_pieces = false;
};

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;     // token_type_ids
  std::vector<int8_t> sequence_ids;  // 0 first text, 1 second text, -1 special
  std::vector<ByteSpan> offsets;     // into the token's own text; {0,0} for specials
  std::vector<std::string> pieces;   // only with EncodeOptions::return_pieces
  size_t size() const { return ids.size(); }
};

// One window of a (first, second) pair whose second text is split with
// overlap: [CLS] first [SEP] second[k..k+n) [SEP].
struct Window {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<int8_t> sequence_ids;  // 0 first, 1 second, -1 special
  // Byte range in the SECOND text for its tokens; nullopt for the first
  // text's tokens and for specials (HF sets these offsets to None).
  std::vector<std::optional<ByteSpan>> second_offsets;
  // Which tokens of the second text's full encoding this window holds:
  // [second_token_begin, second_token_end).
  int second_token_begin = 0;
  int second_token_end = 0;
};

// The window arithmetic of Tokenizer::EncodePairWindows, shared by counting
// and building: a second text of `second_tokens` tokens is split into windows
// of at most `room` of its tokens, window k starting at k * (room - stride).
// Returns how many windows that makes: 1 when second_tokens <= room (also
// for 0 tokens), else 1 + ceil((second_tokens - room) / (room - stride)).
// Requires room > 0 and, when second_tokens > room, 0 <= stride < room
// (else returns -1).
int64_t CountWindows(int64_t second_tokens, int64_t room, int64_t stride);

// What EncodePairWindows would build for one pair, known before any window
// is materialised: both texts' tokens and the window arithmetic. Lets a
// caller refuse a text that needs too many windows (count()) at the cost of
// the tokens alone; Tokenizer::BuildWindows then makes the windows.
class WindowPlan {
 public:
  // Windows. With a `max_windows` cap given to the planner and more needed:
  // max_windows + 1, and count_is_lower_bound() (the rest of the second
  // text was not tokenized; the plan cannot be built, only refused).
  int64_t count() const { return count_; }
  bool count_is_lower_bound() const { return count_is_lower_bound_; }
  int max_length() const { return max_length_; }       // tokens per window, specials included
  int64_t first_tokens() const { return static_cast<int64_t>(first_.size()); }
  int64_t second_tokens() const { return static_cast<int64_t>(second_.size()); }
  int64_t room() const { return room_; }               // second-text tokens per window
  int64_t stride() const { return stride_; }           // overlap, after clamping

 private:
  friend class Tokenizer;
  std::vector<SpmPiece> first_, second_;
  int max_length_ = 0;
  int64_t room_ = 0, stride_ = 0, count_ = 0;
  bool count_is_lower_bound_ = false;
};

class Tokenizer {
 public:
  // `dir`/spm.model, else `dir`/tokenizer.json (Hugging Face Unigram or
  // byte-level BPE), else `dir`/vocab.json + merges.txt (FromBpeDirectory);
  // no text rules (DeBERTa-v2/v3, DeBERTa v1).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  // With `rules` enabled: `dir`/spiece.model (what ALBERT checkpoints ship),
  // else `dir`/spm.model (NotFound naming both when neither exists), encoded
  // with `rules`. With `rules` disabled: FromDirectory(dir).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir,
                                                                  const TextRules& rules);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpmFile(
      const std::string& path, const TextRules& rules = TextRules());
  // A Hugging Face tokenizer.json with a Unigram or a BPE (ByteLevel) model.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJsonFile(const std::string& path);
  // GPT-2 byte-level BPE from `dir`/vocab.json + `dir`/merges.txt (with
  // tokenizer_config.json / special_tokens_map.json; ReadBpeFiles in bpe.h).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromBpeDirectory(const std::string& dir);
  // A byte-level BPE model; it must have [CLS]/[SEP] roles (cls_id/sep_id).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromBpe(std::unique_ptr<BpeModel> bpe);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromProcessor(
      std::unique_ptr<SpmProcessor> processor, const TextRules& rules = TextRules());

  // The text's pieces without specials: SentencePiece's encoding (see
  // SpmProcessor::Encode), or EncodeWithTextRules when rules are enabled,
  // or the byte-level BPE encoding (BpeModel::Encode).
  absl::Status EncodeRaw(std::string_view text, std::vector<SpmPiece>* out,
                         std::vector<std::string>* pieces = nullptr) const {
    encoded_bytes_.fetch_add(text.size(), std::memory_order_relaxed);
    if (bpe_ != nullptr) return bpe_->Encode(text, out, pieces);
    if (!rules_.enabled) return spm_->Encode(text, out, pieces);
    return EncodeWithTextRules(*spm_, rules_, text, out, pieces);
  }

  // Bytes of text run through SentencePiece so far, by every method (the
  // work tokenization did; tests check that truncation stops it early).
  uint64_t encoded_bytes() const { return encoded_bytes_.load(std::memory_order_relaxed); }

  // [CLS] text [SEP].
  absl::StatusOr<Encoding> Encode(std::string_view text, const EncodeOptions& options) const;
  // [CLS] first [SEP] second [SEP].
  absl::StatusOr<Encoding> EncodePair(std::string_view first, std::string_view second,
                                      const EncodeOptions& options) const;

  // Splits `second` into windows so that each window, with [CLS] first [SEP]
  // ... [SEP], has at most `max_length` tokens; consecutive windows share
  // `stride` tokens of `second` (Hugging Face `stride` / `doc_stride`
  // semantics: overlap, not step). `first` is never truncated. A `second`
  // that fits gives one window; an empty one gives one window without
  // second-text tokens. Errors (InvalidArgument): `first` leaves no room
  // for `second`, or stride >= the room left — unless `clamp_stride`, which
  // lowers the stride to half the room `first` leaves so every window
  // advances (what the server, training and eval use with a checkpoint's
  // doc_stride and arbitrary questions).
  absl::StatusOr<std::vector<Window>> EncodePairWindows(std::string_view first,
                                                        std::string_view second,
                                                        int max_length, int stride,
                                                        bool clamp_stride = false) const {
    return EncodeWindows(first, second, max_length, stride, clamp_stride, "first text");
  }

  // HF run_qa.py features: the question is left-stripped of whitespace,
  // then EncodePairWindows(question, context, max_length, doc_stride).
  absl::StatusOr<std::vector<Window>> EncodeQuestionContextWindows(std::string_view question,
                                                                   std::string_view context,
                                                                   int max_length,
                                                                   int doc_stride,
                                                                   bool clamp_stride = false) const;
  // The plan of EncodeQuestionContextWindows (same errors): the window
  // count before any window is built. `max_windows` > 0: stop tokenizing
  // the context once more windows than that are certain (see
  // WindowPlan::count_is_lower_bound), so a huge context that a window
  // limit will refuse costs only the tokens up to the limit.
  absl::StatusOr<WindowPlan> PlanQuestionContextWindows(std::string_view question,
                                                        std::string_view context, int max_length,
                                                        int doc_stride, bool clamp_stride = false,
                                                        int64_t max_windows = 0) const;
  // Rerank chunking of a long document: windows of (query, document).
  absl::StatusOr<std::vector<Window>> EncodeQueryDocumentChunks(std::string_view query,
                                                                std::string_view document,
                                                                int max_length,
                                                                int stride,
                                                                bool clamp_stride = false) const {
    return EncodeWindows(query, document, max_length, stride, clamp_stride, "query");
  }
  // The plan of EncodeQueryDocumentChunks (same errors; `max_windows` as
  // for PlanQuestionContextWindows).
  absl::StatusOr<WindowPlan> PlanQueryDocumentChunks(std::string_view query,
                                                     std::string_view document, int max_length,
                                                     int stride, bool clamp_stride = false,
                                                     int64_t max_windows = 0) const {
    return PlanWindows(query, document, max_length, stride, clamp_stride, "query", max_windows);
  }
  // The plan's windows, plan.count() of them.
  std::vector<Window> BuildWindows(const WindowPlan& plan) const;

  int cls_id() const { return cls_id_; }
  int sep_id() const { return sep_id_; }
  int pad_id() const { return pad_id_; }
  int unk_id() const { return unk_id_; }
  // The model's [MASK] piece, or piece_size() when it has none (added right
  // after the SentencePiece vocabulary, as DeBERTa-v3 does: 128000).
  int mask_id() const { return mask_id_; }
  // Number of token ids: SentencePiece pieces, plus [MASK] when added.
  int vocab_size() const { return vocab_size_; }
  // Empty string for ids out of range.
  const std::string& IdToPiece(int id) const;
  // Id of `piece`, or -1 if unknown.
  int PieceToId(std::string_view piece) const;

  // SentencePiece tokenizers only (is_bpe() false).
  const SpmProcessor& spm() const { return *spm_; }
  bool is_bpe() const { return bpe_ != nullptr; }
  // Byte-level BPE tokenizers only (is_bpe() true).
  const BpeModel& bpe() const { return *bpe_; }
  const TextRules& text_rules() const { return rules_; }

 private:
  Tokenizer(std::unique_ptr<SpmProcessor> spm, const TextRules& rules)
      : spm_(std::move(spm)), rules_(rules) {}
  explicit Tokenizer(std::unique_ptr<BpeModel> bpe) : bpe_(std::move(bpe)) {}

  // One text's raw SentencePiece encoding.
  struct Segment;
  absl::Status EncodeSegment(std::string_view text, bool with_pieces, Segment* seg) const;
  // EncodeSegment of `text`, or, when `cap` > 0 and the text is long, of a
  // prefix cut just before an ASCII whitespace that already holds more than
  // `cap` tokens (then *capped): its tokens are the text's first tokens
  // (pieces never span a whitespace), so truncation to at most `cap` tokens
  // keeps exactly what encoding the whole text would have kept, without
  // tokenizing the rest (issue 16, defect 2: a 1 MiB text costs what its
  // first max_length tokens cost). Byte-level BPE cuts only where
  // BpeModel::CanCutBefore says the prefix's tokens are the text's.
  absl::Status EncodeSegmentCapped(std::string_view text, bool with_pieces, size_t cap, Segment* seg,
                                   bool* capped) const;
  // EncodePairWindows; `first_name` names the first text in errors.
  absl::StatusOr<std::vector<Window>> EncodeWindows(std::string_view first, std::string_view second,
                                                    int max_length, int stride, bool clamp_stride,
                                                    std::string_view first_name) const;
  absl::StatusOr<WindowPlan> PlanWindows(std::string_view first, std::string_view second,
                                         int max_length, int stride, bool clamp_stride,
                                         std::string_view first_name, int64_t max_windows = 0) const;
  void AppendSpecial(int id, int type_id, bool with_pieces, Encoding* enc) const;
  void AppendSegment(const Segment& seg, size_t n, int seq_id, int type_id, bool with_pieces,
                     Encoding* enc) const;

  std::unique_ptr<SpmProcessor> spm_;  // exactly one of spm_ and bpe_
  std::unique_ptr<BpeModel> bpe_;
  mutable std::atomic<uint64_t> encoded_bytes_{0};
  TextRules rules_;
  int cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1, mask_id_ = -1;
  int vocab_size_ = 0;
  std::string mask_piece_ = "[MASK]";
};

}  // namespace dserve
