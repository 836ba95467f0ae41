#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/hf_tokenizer_json.h"
#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/utf8.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

namespace dserve {

struct Tokenizer::Segment {
  std::vector<SpmPiece> tokens;
  std::vector<std::string> pieces;
  size_t size() const { return tokens.size(); }
};

namespace {

// str.lstrip() (HF run_qa.py calls question.lstrip()).
std::string_view PythonLStrip(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp;
    const int n = DecodeUtf8(s, pos, &cp);
    if (n == 0 || !py_unicode::IsSpace(cp)) break;
    pos += n;
  }
  return s.substr(pos);
}

int FirstFound(const SpmProcessor& spm, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (n.empty()) continue;
    const int id = spm.PieceToId(n);
    if (id >= 0) return id;
  }
  return -1;
}

}  // namespace

absl::StatusOr<Truncation> ParseTruncation(std::string_view name) {
  if (name == "none" || name == "do_not_truncate") return Truncation::kNone;
  if (name == "longest_first") return Truncation::kLongestFirst;
  if (name == "only_first") return Truncation::kOnlyFirst;
  if (name == "only_second") return Truncation::kOnlySecond;
  return absl::InvalidArgumentError(absl::StrCat(
      "truncation: unknown value '", std::string(name), "' (none|longest_first|only_first|only_second)"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromProcessor(
    std::unique_ptr<SpmProcessor> processor, const TextRules& rules) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(processor), rules));
  const SpmProcessor& spm = *t->spm_;
  const SpmModelSpec& spec = spm.spec();
  t->cls_id_ = FirstFound(spm, {"[CLS]", spec.bos_piece});
  t->sep_id_ = FirstFound(spm, {"[SEP]", spec.eos_piece});
  if (t->cls_id_ < 0 || t->sep_id_ < 0) {
    return absl::InvalidArgumentError(
        "tokenizer has no [CLS]/[SEP] (or bos/eos) pieces; the layout needs both");
  }
  t->pad_id_ = FirstFound(spm, {"[PAD]", spec.pad_piece});
  if (t->pad_id_ < 0) t->pad_id_ = 0;  // only ever masked out
  t->unk_id_ = spm.unk_id();
  t->mask_id_ = spm.PieceToId(t->mask_piece_);
  t->vocab_size_ = spm.piece_size();
  if (t->mask_id_ < 0) t->mask_id_ = t->vocab_size_++;
  Logger("tokenizer")->debug(
      "loaded tokenizer: {} pieces, vocab_size {}, [CLS]={} [SEP]={} [PAD]={} [UNK]={} [MASK]={}",
      spm.piece_size(), t->vocab_size_, t->cls_id_, t->sep_id_, t->pad_id_, t->unk_id_,
      t->mask_id_);
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpmFile(const std::string& path,
                                                                 const TextRules& rules) {
  ASSIGN_OR_RETURN(auto spm, SpmProcessor::FromFile(path));
  return FromProcessor(std::move(spm), rules);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBpe(std::unique_ptr<BpeModel> bpe) {
  if (bpe->cls_id() < 0 || bpe->sep_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        bpe->spec().vocab_source, ": the BPE tokenizer has no [CLS]/[SEP] tokens; the layout needs both"));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(bpe)));
  const BpeModel& m = *t->bpe_;
  t->cls_id_ = m.cls_id();
  t->sep_id_ = m.sep_id();
  t->pad_id_ = m.pad_id() >= 0 ? m.pad_id() : 0;  // only ever masked out
  t->unk_id_ = m.unk_id();
  t->vocab_size_ = m.piece_size();
  t->mask_id_ = m.mask_id();
  if (t->mask_id_ < 0) t->mask_id_ = t->vocab_size_++;
  Logger("tokenizer")->debug(
      "loaded BPE tokenizer: {} tokens, {} merges, [CLS]={} [SEP]={} [PAD]={} [UNK]={} [MASK]={}",
      m.piece_size(), m.spec().merges.size(), t->cls_id_, t->sep_id_, t->pad_id_, t->unk_id_,
      t->mask_id_);
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBpeDirectory(const std::string& dir) {
  ASSIGN_OR_RETURN(BpeModelSpec spec, ReadBpeFiles(dir));
  ASSIGN_OR_RETURN(auto bpe, BpeModel::Create(std::move(spec)));
  return FromBpe(std::move(bpe));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTokenizerJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(HfTokenizerModel model, ReadHfTokenizerJsonModel(path));
  if (auto* bpe_spec = std::get_if<BpeModelSpec>(&model)) {
    auto bpe = BpeModel::Create(std::move(*bpe_spec));
    if (!bpe.ok()) return bpe.status();  // its messages name the file already
    return FromBpe(*std::move(bpe));
  }
  auto spm = SpmProcessor::FromSpec(std::get<SpmModelSpec>(std::move(model)));
  if (!spm.ok()) {
    return absl::Status(spm.status().code(), absl::StrCat(path, ": ", spm.status().message()));
  }
  return FromProcessor(*std::move(spm));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path spm_path = fs::path(dir) / "spm.model";
  std::error_code ec;
  if (fs::exists(spm_path, ec)) return FromSpmFile(spm_path.string());
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  if (fs::exists(json_path, ec)) return FromTokenizerJsonFile(json_path.string());
  if (fs::exists(fs::path(dir) / "vocab.json", ec) || fs::exists(fs::path(dir) / "merges.txt", ec)) {
    return FromBpeDirectory(dir);  // names whichever of the two is missing
  }
  return absl::NotFoundError(absl::StrCat(
      "no tokenizer in ", dir, ": expected spm.model, tokenizer.json or vocab.json + merges.txt"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir,
                                                                   const TextRules& rules) {
  if (!rules.enabled) return FromDirectory(dir);
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"spiece.model", "spm.model"}) {
    const fs::path path = fs::path(dir) / name;
    if (fs::exists(path, ec)) return FromSpmFile(path.string(), rules);
  }
  return absl::NotFoundError(
      absl::StrCat("no tokenizer in ", dir, ": expected spiece.model or spm.model"));
}

const std::string& Tokenizer::IdToPiece(int id) const {
  if (bpe_ != nullptr) {
    static const std::string* const kMask = new std::string("[MASK]");
    if (id == mask_id_ && id >= bpe_->piece_size()) return *kMask;
    return bpe_->IdToPiece(id);
  }
  if (id == mask_id_ && id >= spm_->piece_size()) return mask_piece_;
  return spm_->IdToPiece(id);
}

int Tokenizer::PieceToId(std::string_view piece) const {
  const int id = bpe_ != nullptr ? bpe_->PieceToId(piece) : spm_->PieceToId(piece);
  if (id < 0 && piece == mask_piece_) return mask_id_;
  return id;
}

absl::Status Tokenizer::EncodeSegment(std::string_view text, bool with_pieces,
                                      Segment* seg) const {
  return EncodeRaw(text, &seg->tokens, with_pieces ? &seg->pieces : nullptr);
}

absl::Status Tokenizer::EncodeSegmentCapped(std::string_view text, bool with_pieces, size_t cap,
                                            Segment* seg, bool* capped) const {
  *capped = false;
  // A token covers at least one byte, and texts of a few KiB cost little:
  // start at 16 bytes per token wanted, double while the prefix falls short.
  size_t prefix = std::max<size_t>(4096, 16 * cap);
  while (cap > 0 && prefix < text.size()) {
    size_t cut = text.find_first_of(" \t\r\n", prefix);
    // Byte-level BPE gives a whitespace run's last character to the next
    // word: only a whitespace that starts a run is a safe cut there.
    while (bpe_ != nullptr && cut != std::string_view::npos && !bpe_->CanCutBefore(text, cut)) {
      cut = text.find_first_of(" \t\r\n", cut + 1);
    }
    if (cut == std::string_view::npos) break;
    *seg = Segment();
    RETURN_IF_ERROR(EncodeSegment(text.substr(0, cut), with_pieces, seg));
    if (seg->size() > cap) {
      *capped = true;
      return absl::OkStatus();
    }
    prefix = 2 * cut;
  }
  *seg = Segment();
  return EncodeSegment(text, with_pieces, seg);
}

void Tokenizer::AppendSpecial(int id, int type_id, bool with_pieces, Encoding* enc) const {
  enc->ids.push_back(id);
  enc->type_ids.push_back(type_id);
  enc->sequence_ids.push_back(-1);
  enc->offsets.push_back({0, 0});
  if (with_pieces) enc->pieces.push_back(IdToPiece(id));
}

void Tokenizer::AppendSegment(const Segment& seg, size_t n, int seq_id, int type_id,
                              bool with_pieces, Encoding* enc) const {
  for (size_t i = 0; i < n; ++i) {
    const SpmPiece& p = seg.tokens[i];
    enc->ids.push_back(p.id);
    enc->type_ids.push_back(type_id);
    enc->sequence_ids.push_back(static_cast<int8_t>(seq_id));
    enc->offsets.push_back({p.begin, p.end});
    if (with_pieces) enc->pieces.push_back(seg.pieces[i]);
  }
}

absl::StatusOr<Encoding> Tokenizer::Encode(std::string_view text,
                                           const EncodeOptions& options) const {
  Segment a;
  // Truncation keeps at most max_length tokens: the rest of a long text
  // need not be tokenized (with truncation off the error names the count).
  const bool truncating = options.max_length > 0 && (options.truncation == Truncation::kLongestFirst ||
                                                     options.truncation == Truncation::kOnlyFirst);
  if (truncating) RETURN_IF_ERROR(ValidateUtf8(text, "text"));
  bool capped = false;
  RETURN_IF_ERROR(EncodeSegmentCapped(text, options.return_pieces,
                                      truncating ? static_cast<size_t>(options.max_length) : 0, &a, &capped));
  size_t n = a.size();
  if (options.max_length > 0) {
    if (options.max_length < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_length ", options.max_length, " is below the 2 special tokens"));
    }
    const size_t budget = static_cast<size_t>(options.max_length) - 2;
    if (n > budget) {
      if (options.truncation == Truncation::kNone || options.truncation == Truncation::kOnlySecond) {
        return absl::InvalidArgumentError(absl::StrCat(
            "text has ", n + 2, " tokens (with [CLS] and [SEP]), more than max_length ",
            options.max_length,
            options.truncation == Truncation::kNone ? " and truncation is off"
                                                    : "; only_second needs a text pair"));
      }
      n = budget;
    }
  }
  Encoding enc;
  enc.ids.reserve(n + 2);
  AppendSpecial(cls_id_, 0, options.return_pieces, &enc);
  AppendSegment(a, n, 0, 0, options.return_pieces, &enc);
  AppendSpecial(sep_id_, 0, options.return_pieces, &enc);
  return enc;
}

absl::StatusOr<Encoding> Tokenizer::EncodePair(std::string_view first, std::string_view second,
                                               const EncodeOptions& options) const {
  RETURN_IF_ERROR(ValidateUtf8(first, "text"));
  RETURN_IF_ERROR(ValidateUtf8(second, "text_pair"));
  Segment a, b;
  // A text that truncation may cut needs only its first max_length tokens
  // (EncodeSegmentCapped): longest_first keeps at most that many of either
  // text, only_first of the first, only_second of the second.
  const size_t cap = options.max_length > 0 ? static_cast<size_t>(options.max_length) : 0;
  const bool cap_first = options.truncation == Truncation::kLongestFirst || options.truncation == Truncation::kOnlyFirst;
  const bool cap_second =
      options.truncation == Truncation::kLongestFirst || options.truncation == Truncation::kOnlySecond;
  bool capped_a = false, capped_b = false;
  RETURN_IF_ERROR(EncodeSegmentCapped(first, options.return_pieces, cap_first ? cap : 0, &a, &capped_a));
  RETURN_IF_ERROR(EncodeSegmentCapped(second, options.return_pieces, cap_second ? cap : 0, &b, &capped_b));
  if (capped_a && capped_b) {
    // longest_first gives the odd token of an odd budget to the longer
    // text: with both cut short, which one that is needs the full counts.
    RETURN_IF_ERROR(EncodeSegment(first, options.return_pieces, &(a = Segment())));
    RETURN_IF_ERROR(EncodeSegment(second, options.return_pieces, &(b = Segment())));
  }
  size_t na = a.size(), nb = b.size();
  if (options.max_length > 0) {
    if (options.max_length < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_length ", options.max_length, " is below the 3 special tokens"));
    }
    const size_t budget = static_cast<size_t>(options.max_length) - 3;
    if (na + nb > budget) {
      const size_t to_remove = na + nb - budget;
      auto too_long = [&](std::string_view why) {
        return absl::InvalidArgumentError(absl::StrCat(
            "text pair has ", na + nb + 3, " tokens (with specials), more than max_length ",
            options.max_length, std::string(why)));
      };
      switch (options.truncation) {
        case Truncation::kNone:
          return too_long(" and truncation is off");
        case Truncation::kOnlyFirst:
          // As HF tokenizers: the truncated text must keep at least one token.
          if (na <= to_remove) return too_long("; only_first cannot trim the first text enough");
          na -= to_remove;
          break;
        case Truncation::kOnlySecond:
          if (nb <= to_remove) return too_long("; only_second cannot trim the second text enough");
          nb -= to_remove;
          break;
        case Truncation::kLongestFirst: {
          // HF tokenizers (Rust) TruncationStrategy::LongestFirst.
          size_t n1 = na, n2 = nb;
          const bool swap = n1 > n2;
          if (swap) std::swap(n1, n2);
          if (n1 > budget) {
            n2 = n1;
          } else {
            n2 = std::max(n1, budget - n1);
          }
          if (n1 + n2 > budget) {
            n1 = budget / 2;
            n2 = n1 + budget % 2;
          }
          if (swap) std::swap(n1, n2);
          na = std::min(na, n1);
          nb = std::min(nb, n2);
          break;
        }
      }
    }
  }
  Encoding enc;
  enc.ids.reserve(na + nb + 3);
  AppendSpecial(cls_id_, 0, options.return_pieces, &enc);
  AppendSegment(a, na, 0, 0, options.return_pieces, &enc);
  AppendSpecial(sep_id_, 0, options.return_pieces, &enc);
  AppendSegment(b, nb, 1, 1, options.return_pieces, &enc);
  AppendSpecial(sep_id_, 1, options.return_pieces, &enc);
  return enc;
}

int64_t CountWindows(int64_t second_tokens, int64_t room, int64_t stride) {
  if (room <= 0 || second_tokens < 0) return -1;
  if (second_tokens <= room) return 1;
  if (stride < 0 || stride >= room) return -1;
  const int64_t step = room - stride;
  return 1 + (second_tokens - room + step - 1) / step;
}

absl::StatusOr<WindowPlan> Tokenizer::PlanWindows(std::string_view first, std::string_view second,
                                                  int max_length, int stride, bool clamp_stride,
                                                  std::string_view first_name, int64_t max_windows) const {
  if (stride < 0) return absl::InvalidArgumentError(absl::StrCat("stride ", stride, " is negative"));
  WindowPlan plan;
  RETURN_IF_ERROR(EncodeRaw(first, &plan.first_));
  const int64_t budget = static_cast<int64_t>(max_length) - 3 - plan.first_tokens();
  if (budget <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(first_name), " has ", plan.first_tokens(),
        " tokens; with 3 special tokens it leaves no room in max_length ", max_length));
  }
  if (clamp_stride) stride = static_cast<int>(std::min<int64_t>(stride, budget / 2));
  // `max_windows` windows hold at most budget + (max_windows - 1) x step
  // second-text tokens: past that the plan will be refused, so tokenizing
  // stops there (issue 16, defect 2).
  size_t cap = 0;
  if (max_windows > 0 && stride < budget) {
    cap = static_cast<size_t>(budget + (max_windows - 1) * (budget - stride));
  }
  {
    Segment seg;
    bool capped = false;
    RETURN_IF_ERROR(EncodeSegmentCapped(second, /*with_pieces=*/false, cap, &seg, &capped));
    plan.second_ = std::move(seg.tokens);
    plan.count_is_lower_bound_ = capped;
  }
  const int64_t n = plan.second_tokens();
  if (n > budget && stride >= budget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stride ", stride, " must be smaller than the ", budget,
        " tokens left for the second text in max_length ", max_length));
  }
  plan.max_length_ = max_length;
  plan.room_ = budget;
  plan.stride_ = stride;
  plan.count_ = plan.count_is_lower_bound_ ? max_windows + 1 : CountWindows(n, budget, stride);
  return plan;
}

std::vector<Window> Tokenizer::BuildWindows(const WindowPlan& plan) const {
  const int64_t n = plan.second_tokens();
  const int64_t step = plan.room_ - plan.stride_;  // > 0 whenever count > 1
  std::vector<Window> windows;
  windows.reserve(static_cast<size_t>(std::max<int64_t>(plan.count_, 0)));
  for (int64_t k = 0; k < plan.count_; ++k) {
    const int64_t start = k * step;
    const int64_t stop = std::min(start + plan.room_, n);
    Window w;
    const size_t len = plan.first_.size() + static_cast<size_t>(stop - start) + 3;
    w.ids.reserve(len);
    w.type_ids.reserve(len);
    w.sequence_ids.reserve(len);
    w.second_offsets.reserve(len);
    auto push = [&w](int id, int type, int seq, std::optional<ByteSpan> off) {
      w.ids.push_back(id);
      w.type_ids.push_back(type);
      w.sequence_ids.push_back(static_cast<int8_t>(seq));
      w.second_offsets.push_back(off);
    };
    push(cls_id_, 0, -1, std::nullopt);
    for (const SpmPiece& p : plan.first_) push(p.id, 0, 0, std::nullopt);
    push(sep_id_, 0, -1, std::nullopt);
    for (int64_t i = start; i < stop; ++i) {
      const SpmPiece& p = plan.second_[i];
      push(p.id, 1, 1, ByteSpan{p.begin, p.end});
    }
    push(sep_id_, 1, -1, std::nullopt);
    w.second_token_begin = static_cast<int>(start);
    w.second_token_end = static_cast<int>(stop);
    windows.push_back(std::move(w));
  }
  return windows;
}

absl::StatusOr<std::vector<Window>> Tokenizer::EncodeWindows(std::string_view first,
                                                             std::string_view second, int max_length,
                                                             int stride, bool clamp_stride,
                                                             std::string_view first_name) const {
  ASSIGN_OR_RETURN(WindowPlan plan,
                   PlanWindows(first, second, max_length, stride, clamp_stride, first_name));
  return BuildWindows(plan);
}

absl::StatusOr<WindowPlan> Tokenizer::PlanQuestionContextWindows(std::string_view question,
                                                                 std::string_view context,
                                                                 int max_length, int doc_stride,
                                                                 bool clamp_stride, int64_t max_windows) const {
  RETURN_IF_ERROR(ValidateUtf8(question, "question"));
  RETURN_IF_ERROR(ValidateUtf8(context, "context"));
  return PlanWindows(PythonLStrip(question), context, max_length, doc_stride, clamp_stride, "question",
                     max_windows);
}

absl::StatusOr<std::vector<Window>> Tokenizer::EncodeQuestionContextWindows(
    std::string_view question, std::string_view context, int max_length, int doc_stride,
    bool clamp_stride) const {
  ASSIGN_OR_RETURN(WindowPlan plan,
                   PlanQuestionContextWindows(question, context, max_length, doc_stride, clamp_stride));
  return BuildWindows(plan);
}

}  // namespace dserve
