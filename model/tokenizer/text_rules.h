// Text rules that Hugging Face's slow SentencePiece tokenizers apply around
// SentencePiece (AlbertTokenizer, transformers tokenization_albert.py;
// XLNetTokenizer has the same ones), with offsets back to the original text.
//
// With rules enabled, a text is encoded as
//   1. do_lower_case: every code point lower-cased on its own (str.lower()
//      of one character, as PreTrainedTokenizer.tokenize does before
//      _tokenize: no final sigma here, "İ" gives "i̇");
//   2. remove_space: stripped, each run of str.isspace() characters made
//      one ' ' (" ".join(text.strip().split()));
//   3. "``" and then "''" replaced by '"';
//   4. !keep_accents: NFKD, then combining characters dropped;
//   5. do_lower_case: str.lower() of the result (the final-sigma rule can
//      only meet a U+03A3 that step 4 made, e.g. from U+1D6BA);
//   6. SentencePiece encoding; a piece of two or more characters ending in
//      a digit (str.isdigit()) and ',' is replaced by the SentencePiece
//      encoding of the piece without ',' and without '▁', then ','; when
//      the piece did not start with '▁', the '▁' that encoding puts in
//      front is removed (a lone '▁' piece dropped);
//   7. each piece's id is its vocabulary id, or the unknown id when the
//      vocabulary has no such piece.
// Special tokens written in the text ("[CLS]", "[MASK]", ...) are plain
// text here, as in the DeBERTa path (Hugging Face would split them out).
// Python's Unicode tables (Unicode 14.0) are used throughout (py_unicode.h).
//
// Offsets: each piece maps to the original bytes of the characters it came
// from: "Café" -> "cafe" maps "e" to "é"; the '"' of "``" to both
// backticks; a collapsed run of whitespace to the whole run; a combining
// character that step 4 drops, or one that SentencePiece's normalizer
// drops, to the character before it. Pieces made from one character (a
// ligature or "ﷺ" cut into several pieces, byte-fallback pieces, Hangul
// jamo that NFKC composes into one syllable) all get the whole of it, so
// their spans may overlap; begins never go backwards. SentencePiece's
// dummy '▁' piece has no source: it is empty, where the text starts.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/spm_processor.h"

namespace dserve {

struct TextRules {
  // false: SentencePiece alone (DebertaV2Tokenizer), at no extra cost; the
  // fields below are then ignored.
  bool enabled = false;
  // Steps 1 and 5 (Hugging Face `do_lower_case`).
  bool do_lower_case = true;
  // Step 2 (`remove_space`).
  bool remove_space = true;
  // true skips step 4 (`keep_accents`).
  bool keep_accents = false;
};

// Enabled, with AlbertTokenizer's defaults: do_lower_case, remove_space,
// !keep_accents.
TextRules AlbertTextRules();

// AlbertTextRules(), with `do_lower_case`, `remove_space` and
// `keep_accents` taken from `dir`/tokenizer_config.json when that file
// exists and sets them. Errors (InvalidArgument, naming the file): the file
// cannot be read or is not a JSON object; one of the three keys is not a
// boolean (the message names the key).
absl::StatusOr<TextRules> ReadAlbertTextRules(const std::string& dir);

// Original byte range [begin, end).
struct SourceSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
};

// A text after steps 1-5, and where each of its bytes came from.
struct AlignedText {
  std::string text;
  // Per byte of `text`: the original bytes of the character(s) it came from
  // (with any dropped combining characters that followed them).
  std::vector<uint32_t> source_begin;
  std::vector<uint32_t> source_end;
  // Where an empty range at text.size() maps.
  uint32_t end_offset = 0;

  // The original bytes that `text` bytes [begin, end) came from: from the
  // first byte's source to the last byte's; an empty range maps to an empty
  // one. Requires begin <= end <= text.size().
  SourceSpan ToOriginal(uint32_t begin, uint32_t end) const;
};

// Steps 1-5 of `rules` (which must be enabled) on well-formed UTF-8 `text`.
AlignedText PreprocessText(std::string_view text, const TextRules& rules);

// Steps 1-7: like SpmProcessor::Encode (same errors, `pieces` optional,
// outputs cleared first), with offsets into the original `text` as
// described above and piece texts after step 6.
absl::Status EncodeWithTextRules(const SpmProcessor& spm, const TextRules& rules,
                                 std::string_view text, std::vector<SpmPiece>* out,
                                 std::vector<std::string>* pieces = nullptr);

}  // namespace dserve
