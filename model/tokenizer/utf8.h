// UTF-8 helpers for the tokenizer: strict validation (with the byte position
// of the first error), SentencePiece's character-length rule, and conversion
// of byte offsets to Unicode code-point offsets (the gRPC API reports
// code points).
//
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace dserve {

// Length in bytes of the UTF-8 sequence whose lead byte is `lead`, as
// SentencePiece computes it from the high nibble (1 for continuation and
// invalid bytes). Callers clamp it to the bytes left.
inline int Utf8CharLen(unsigned char lead) {
  static constexpr int8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                      1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes one code point from `s` starting at byte `pos` (must be < size).
// Returns the number of bytes consumed, or 0 if the bytes at `pos` are not a
// well-formed UTF-8 sequence (overlong, surrogate, > U+10FFFF, truncated or
// stray continuation byte). `*cp` receives the code point on success.
int DecodeUtf8(std::string_view s, size_t pos, char32_t* cp);

// OK if `s` is well-formed UTF-8; otherwise InvalidArgument naming the byte
// position of the first malformed sequence, e.g.
// "invalid UTF-8 at byte 7 (0xFF)". `what` names the field in the message.
absl::Status ValidateUtf8(std::string_view s, std::string_view what = "text");

// Number of code points in a well-formed UTF-8 string.
size_t CountCodepoints(std::string_view s);

// Maps byte offsets of a well-formed UTF-8 string to code-point offsets.
// Built once per string in O(n); each lookup is O(1). An offset that falls
// inside a multi-byte character maps to the code point containing it.
class CodepointIndex {
 public:
  explicit CodepointIndex(std::string_view text);
  // `byte_offset` in [0, text.size()].
  uint32_t ToCodepoint(size_t byte_offset) const { return cp_at_byte_[byte_offset]; }
  size_t num_codepoints() const { return cp_at_byte_.empty() ? 0 : cp_at_byte_.back(); }

 private:
  std::vector<uint32_t> cp_at_byte_;  // size text.size() + 1
};

// Encodes `cp` as UTF-8 and appends it to `out`.
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace dserve
