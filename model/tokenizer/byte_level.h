// The byte level of GPT-2's tokenizer (used as is by RoBERTa and DeBERTa v1):
// the bytes-to-unicode alphabet that lets every byte be a vocabulary
// symbol, and the GPT-2 pre-tokenizer pattern
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// matched by hand with the semantics of Python's `regex` module (findall:
// leftmost match, alternatives tried in order, greedy runs): contractions
// in lower case only; a single ' ' joins the letter, number or other run
// after it; a whitespace run followed by a non-space leaves its last
// character to the next chunk (\s+(?!\S)), so "a   b" splits as "a", "  ",
// " b" and "x\t\ny" as "x", "\t", "\n", "y". \p{L}, \p{N} and \s are the
// regex module's classes (py_unicode::RegexClassOf). The chunks cover the
// text exactly.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace dserve {

// bytes_to_unicode(): the code point that stands for byte `b` in
// vocabulary strings. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for
// themselves; the other 68, in increasing order, for U+0100, U+0101, ...
// (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
char32_t ByteToUnicode(uint8_t b);
// The same as UTF-8 (1 or 2 bytes).
std::string_view ByteToUnicodeUtf8(uint8_t b);
// The inverse: the byte that `c` stands for, or -1 when `c` is no byte's.
int UnicodeToByte(char32_t c);

// Appends the vocabulary form of `bytes` (each byte as its code point, in
// UTF-8) to `out`.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Splits `text` with the GPT-2 pattern. `bounds` receives the chunk
// boundaries in bytes: 0, end of chunk 1, ..., text.size() (just {0} for an
// empty text); chunk k is [bounds[k], bounds[k+1]). InvalidArgument naming
// the byte position when `text` is not well-formed UTF-8.
absl::Status Gpt2PreTokenize(std::string_view text, std::vector<uint32_t>* bounds);

// True when a chunk boundary of the GPT-2 pattern is certain at byte `pos`
// whatever follows it: text[pos] is an ASCII whitespace and the character
// before it is no whitespace (\s). Then the chunks of text[0, pos) are
// exactly the chunks that the whole text has before `pos` (a whitespace run
// cut in two would encode differently). False for pos 0 and pos >= size.
bool Gpt2CutIsSafe(std::string_view text, size_t pos);

}  // namespace dserve
