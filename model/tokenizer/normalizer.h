// SentencePiece-compatible text normalizer.
//
// Applies, in one left-to-right pass over the original text: user-defined
// symbols kept verbatim (longest match first), the precompiled charsmap
// (longest-match rewrite rules such as NFKC), removal of leading, trailing
// and repeated spaces, the dummy prefix (or suffix with
// treat_whitespace_as_suffix) and escaping of ' ' as U+2581 ("▁").
// Alongside the normalized string it returns, for every normalized byte, the
// byte offset in the original text it came from (plus one final entry), which
// is how SentencePiece maps pieces back to the original text.
//
// Immutable after Create; Normalize is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/trie.h"

namespace dserve {

struct NormalizerOptions {
  // <uint32 LE trie size><darts-clone units><NUL-terminated replacements>;
  // empty means identity.
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  // Pieces that are matched before normalization and copied verbatim.
  std::vector<std::string> user_defined_symbols;
};

class Normalizer {
 public:
  static absl::StatusOr<std::unique_ptr<Normalizer>> Create(NormalizerOptions options);

  // Normalizes `input` (well-formed UTF-8). `norm_to_orig` gets
  // normalized->size() + 1 entries: entry i is the byte offset in `input` of
  // the source of normalized byte i; the last entry is where the consumed
  // input ends. Both outputs are cleared first (their capacity is reused).
  void Normalize(std::string_view input, std::string* normalized,
                 std::vector<uint32_t>* norm_to_orig) const;

  // Convenience overload for tests.
  std::string Normalize(std::string_view input) const;

  const NormalizerOptions& options() const { return options_; }

 private:
  explicit Normalizer(NormalizerOptions options) : options_(std::move(options)) {}

  // The replacement for the longest rule matching a prefix of `input`, and
  // the number of input bytes it consumes (>= 1 for non-empty input).
  std::pair<std::string_view, size_t> NormalizePrefix(std::string_view input) const;

  NormalizerOptions options_;
  std::vector<uint32_t> units_;  // aligned copy of the darts-clone array
  DartsCloneView charsmap_;
  std::string_view replacements_;  // points into options_.precompiled_charsmap
  PieceTrie user_symbols_;
};

}  // namespace dserve
