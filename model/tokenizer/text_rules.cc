#include "model/tokenizer/text_rules.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/utf8.h"
#include "model/util/status_macros.h"

namespace dserve {

namespace {

namespace pu = ::dserve::py_unicode;

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // ▁
constexpr char32_t kCapitalSigma = 0x3A3, kSmallSigma = 0x3C3;

// Steps 1-5 in one pass over the text, each step feeding the next one code
// point at a time with the original bytes [begin, end) it came from, so no
// intermediate copy of the text is made.
class Preprocessor {
 public:
  Preprocessor(const TextRules& rules, AlignedText* out) : rules_(rules), out_(out) {}

  void Run(std::string_view text) {
    out_->text.reserve(text.size());
    out_->source_begin.reserve(text.size());
    out_->source_end.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      char32_t c = 0xFFFD;  // for malformed input, which callers must not pass
      const int n = std::max(DecodeUtf8(text, pos, &c), 1);
      SplitSpaces(c, static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + n));
      pos += n;
    }
    Finish();
  }

 private:
  // Step 2, then step 1 (no lower-cased character is a space and no space
  // lower-cases, so the order does not matter): leading and trailing runs
  // are dropped, inner runs become one ' ' from the whole run.
  void SplitSpaces(char32_t c, uint32_t begin, uint32_t end) {
    if (rules_.remove_space && pu::IsSpace(c)) {
      if (!seen_text_) return;
      if (!in_run_) run_begin_ = begin;
      in_run_ = true;
      run_end_ = end;
      return;
    }
    if (in_run_) MergeQuotes(' ', run_begin_, run_end_);
    in_run_ = false;
    seen_text_ = true;
    char32_t mapped[pu::kMaxMapped];
    int m = 1;
    mapped[0] = c;
    if (rules_.do_lower_case) m = pu::LowerFull(c, mapped);
    for (int i = 0; i < m; ++i) MergeQuotes(mapped[i], begin, end);
  }

  // Step 3: a '`' or '\'' waits for the next code point; the same one again
  // makes the pair one '"' (a merged pair never merges again, as
  // str.replace scans left to right).
  void MergeQuotes(char32_t c, uint32_t begin, uint32_t end) {
    if (quote_ != 0 && c == quote_) {
      quote_ = 0;
      StripAccents('"', quote_begin_, end);
      return;
    }
    FlushQuote();
    if (c == '`' || c == '\'') {
      quote_ = c;
      quote_begin_ = begin;
      quote_end_ = end;
      return;
    }
    StripAccents(c, begin, end);
  }
  void FlushQuote() {
    if (quote_ == 0) return;
    const char32_t q = quote_;
    quote_ = 0;
    StripAccents(q, quote_begin_, quote_end_);
  }

  // Step 4. A dropped character's bytes join the character before it (or,
  // at the start, the first one after it).
  void StripAccents(char32_t c, uint32_t begin, uint32_t end) {
    if (rules_.keep_accents) return Lower(c, begin, end);
    char32_t mapped[pu::kMaxMapped];
    const int m = pu::DecomposeStripped(c, mapped);
    if (m == 0) {
      if (!out_->text.empty()) {
        for (size_t i = last_char_; i < out_->source_end.size(); ++i) {
          out_->source_end[i] = std::max(out_->source_end[i], end);
        }
      } else if (!dropped_first_) {
        dropped_first_ = true;
        dropped_begin_ = begin;
      }
      return;
    }
    if (out_->text.empty() && dropped_first_) begin = dropped_begin_;
    for (int i = 0; i < m; ++i) Lower(mapped[i], begin, end);
  }

  // Step 5. CPython's final sigma needs the next character that is not
  // case-ignorable, so a U+03A3 after a cased one is written as σ and
  // turned into ς (same length) unless a cased character comes next.
  void Lower(char32_t c, uint32_t begin, uint32_t end) {
    if (!rules_.do_lower_case) return Append(c, begin, end);
    const pu::SigmaContext context = pu::SigmaContextOf(c);
    const bool final_candidate = c == kCapitalSigma && last_context_ == pu::SigmaContext::kCased;
    if (context != pu::SigmaContext::kCaseIgnorable) {
      ResolveSigma(context == pu::SigmaContext::kCased);
      last_context_ = context;
    }
    if (c == kCapitalSigma) {
      Append(kSmallSigma, begin, end);
      if (final_candidate) open_sigma_ = out_->text.size() - 1;
      return;
    }
    char32_t mapped[pu::kMaxMapped];
    const int m = pu::LowerFull(c, mapped);
    for (int i = 0; i < m; ++i) Append(mapped[i], begin, end);
  }
  void ResolveSigma(bool cased_follows) {
    if (open_sigma_ == kNone) return;
    if (!cased_follows) out_->text[open_sigma_] = '\x82';  // U+03C3 CF 83 -> U+03C2 CF 82
    open_sigma_ = kNone;
  }

  void Append(char32_t c, uint32_t begin, uint32_t end) {
    last_char_ = out_->text.size();
    AppendUtf8(c, &out_->text);
    const size_t n = out_->text.size() - last_char_;
    out_->source_begin.insert(out_->source_begin.end(), n, begin);
    out_->source_end.insert(out_->source_end.end(), n, end);
  }

  void Finish() {
    FlushQuote();
    ResolveSigma(false);
    out_->end_offset = out_->source_end.empty() ? 0 : out_->source_end.back();
  }

  static constexpr size_t kNone = static_cast<size_t>(-1);

  const TextRules& rules_;
  AlignedText* out_;
  bool seen_text_ = false, in_run_ = false;
  uint32_t run_begin_ = 0, run_end_ = 0;
  char32_t quote_ = 0;
  uint32_t quote_begin_ = 0, quote_end_ = 0;
  bool dropped_first_ = false;
  uint32_t dropped_begin_ = 0;
  pu::SigmaContext last_context_ = pu::SigmaContext::kOther;
  size_t open_sigma_ = kNone;
  size_t last_char_ = 0;  // where the last code point's bytes start in out_->text
};

// What SentencePiece cut from AlignedText, and how to map it back.
class PieceMapper {
 public:
  PieceMapper(const SpmProcessor& spm, const AlignedText& pre, const SpmTrace& trace)
      : spm_(spm), pre_(pre), trace_(trace) {
    // The dummy '▁' SentencePiece adds has no source text.
    const NormalizerOptions& o = spm.spec().normalizer;
    const uint32_t size = static_cast<uint32_t>(trace.normalized.size());
    const uint32_t marker = o.escape_whitespaces ? kSpaceSymbol.size() : 1;
    if (o.add_dummy_prefix && size >= marker) {
      dummy_begin_ = o.treat_whitespace_as_suffix ? size - marker : 0;
      dummy_end_ = dummy_begin_ + marker;
    }
  }

  // Original bytes of normalized bytes [nb, ne): from the character the
  // first byte came from to the end of the one the last byte came from,
  // even when that character's normalization goes on into the next piece
  // (where libsentencepiece cuts it short, or leaves the piece empty). The
  // dummy '▁' alone keeps SentencePiece's empty span.
  SourceSpan Map(uint32_t nb, uint32_t ne) const {
    const std::vector<uint32_t>& n2o = trace_.norm_to_orig;
    size_t end = ne;
    if (ne > nb && !(nb >= dummy_begin_ && ne <= dummy_end_)) {
      const size_t last = n2o.size() - 1;
      while (end < last && n2o[end] == n2o[ne - 1]) ++end;
    }
    return pre_.ToOriginal(n2o[nb], n2o[end]);
  }

  // Step 7 for a piece that SentencePiece gave `id`.
  int Id(int id, std::string_view text) const {
    if (id != spm_.unk_id()) return id;
    const int found = spm_.PieceToId(text);
    return found >= 0 ? found : id;
  }
  int LookUp(std::string_view text) const { return Id(spm_.unk_id(), text); }

 private:
  const SpmProcessor& spm_;
  const AlignedText& pre_;
  const SpmTrace& trace_;
  uint32_t dummy_begin_ = 0, dummy_end_ = 0;  // in normalized bytes; empty if none
};

bool StartsWithMarker(std::string_view piece) {
  return piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol;
}

// Step 6's test: two or more characters, the last ',' and the one before it
// a digit.
bool IsDigitComma(std::string_view piece) {
  if (piece.size() < 2 || piece.back() != ',') return false;
  size_t start = piece.size() - 2;
  while (start > 0 && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) --start;
  char32_t c;
  return DecodeUtf8(piece, start, &c) > 0 && pu::IsDigit(c);
}

class RuleEncoder {
 public:
  RuleEncoder(const SpmProcessor& spm, const PieceMapper& mapper, std::vector<SpmPiece>* out,
              std::vector<std::string>* pieces)
      : spm_(spm), mapper_(mapper), out_(out), pieces_(pieces) {}

  void Emit(int id, SourceSpan span, std::string_view text) {
    out_->push_back({id, span.begin, span.end});
    if (pieces_) pieces_->emplace_back(text);
  }

  // The piece `text` at normalized bytes [nb, ne), which IsDigitComma.
  absl::Status SplitDigitComma(std::string_view text, uint32_t nb, uint32_t ne);

 private:
  const SpmProcessor& spm_;
  const PieceMapper& mapper_;
  std::vector<SpmPiece>* out_;
  std::vector<std::string>* pieces_;
};

// The piece `text` (at normalized byte `nb`) without its last byte (',')
// and its '▁'s; `at` gets where each byte of that sits in the normalized
// text.
std::string BareDigits(std::string_view text, uint32_t nb, std::vector<uint32_t>* at) {
  std::string bare;
  for (size_t k = 0; k + 1 < text.size();) {
    if (text.substr(k, kSpaceSymbol.size()) == kSpaceSymbol) {
      k += kSpaceSymbol.size();
      continue;
    }
    bare.push_back(text[k]);
    at->push_back(nb + static_cast<uint32_t>(k));
    ++k;
  }
  return bare;
}

absl::Status RuleEncoder::SplitDigitComma(std::string_view text, uint32_t nb, uint32_t ne) {
  std::vector<uint32_t> at;
  const std::string bare = BareDigits(text, nb, &at);
  std::vector<SpmPiece> sub;
  std::vector<std::string> sub_text;
  RETURN_IF_ERROR(spm_.Encode(bare, &sub, &sub_text));
  const bool had_marker = StartsWithMarker(text);
  for (size_t k = 0; k < sub.size(); ++k) {
    std::string_view piece = sub_text[k];
    int id = mapper_.Id(sub[k].id, piece);
    const bool leading_marker = k == 0 && StartsWithMarker(piece);
    if (leading_marker && !had_marker) {
      piece.remove_prefix(kSpaceSymbol.size());
      if (piece.empty()) continue;
      id = mapper_.LookUp(piece);
    }
    uint32_t b = sub[k].begin < at.size() ? at[sub[k].begin] : ne - 1;
    const uint32_t e = sub[k].end > sub[k].begin ? at[sub[k].end - 1] + 1 : b;
    if (leading_marker && had_marker) b = nb;  // its '▁' is the piece's
    Emit(id, mapper_.Map(b, std::max(b, e)), piece);
  }
  Emit(mapper_.LookUp(","), mapper_.Map(ne - 1, ne), ",");
  return absl::OkStatus();
}

}  // namespace

TextRules AlbertTextRules() {
  TextRules rules;
  rules.enabled = true;
  return rules;
}

absl::StatusOr<TextRules> ReadAlbertTextRules(const std::string& dir) {
  TextRules rules = AlbertTextRules();
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rules;
  std::ifstream in(path);
  if (!in.is_open()) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  std::stringstream buf;
  buf << in.rdbuf();
  const nlohmann::json config =
      nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON"));
  }
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  const std::pair<const char*, bool*> keys[] = {{"do_lower_case", &rules.do_lower_case},
                                                {"remove_space", &rules.remove_space},
                                                {"keep_accents", &rules.keep_accents}};
  for (const auto& [key, field] : keys) {
    const auto it = config.find(key);
    if (it == config.end()) continue;
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"", key, "\" must be true or false, not ", it->dump()));
    }
    *field = it->get<bool>();
  }
  return rules;
}

SourceSpan AlignedText::ToOriginal(uint32_t begin, uint32_t end) const {
  if (end > begin) return {source_begin[begin], source_end[end - 1]};
  const uint32_t at = begin < text.size() ? source_begin[begin] : end_offset;
  return {at, at};
}

AlignedText PreprocessText(std::string_view text, const TextRules& rules) {
  AlignedText out;
  Preprocessor(rules, &out).Run(text);
  return out;
}

absl::Status EncodeWithTextRules(const SpmProcessor& spm, const TextRules& rules,
                                 std::string_view text, std::vector<SpmPiece>* out,
                                 std::vector<std::string>* pieces) {
  out->clear();
  if (pieces) pieces->clear();
  RETURN_IF_ERROR(ValidateUtf8(text));
  const AlignedText pre = PreprocessText(text, rules);
  // Kept per thread: Encode swaps its scratch buffers with the trace's, so
  // both keep their capacity from one text to the next.
  thread_local std::vector<SpmPiece> raw;
  thread_local SpmTrace trace;
  RETURN_IF_ERROR(spm.Encode(pre.text, &raw, nullptr, &trace));
  const PieceMapper mapper(spm, pre, trace);
  RuleEncoder encoder(spm, mapper, out, pieces);
  out->reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto [nb, ne] = trace.spans[i];
    const bool is_byte = spm.type(raw[i].id) == PieceType::kByte;
    const std::string_view piece =
        is_byte ? std::string_view(spm.IdToPiece(raw[i].id))
                : std::string_view(trace.normalized).substr(nb, ne - nb);
    if (IsDigitComma(piece)) {
      RETURN_IF_ERROR(encoder.SplitDigitComma(piece, nb, ne));
    } else {
      encoder.Emit(mapper.Id(raw[i].id, piece), mapper.Map(nb, ne), piece);
    }
  }
  return absl::OkStatus();
}

}  // namespace dserve
