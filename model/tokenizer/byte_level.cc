#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/py_unicode.h"
#include "model/tokenizer/utf8.h"

namespace dserve {
namespace {

using py_unicode::RegexClass;

struct Alphabet {
  std::array<char32_t, 256> cp{};
  std::array<std::string, 256> utf8;
  Alphabet() {
    auto self = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      cp[b] = self(b) ? static_cast<char32_t>(b) : next++;
      AppendUtf8(cp[b], &utf8[b]);
    }
  }
};

const Alphabet& GetAlphabet() {
  static const Alphabet* const kAlphabet = new Alphabet();
  return *kAlphabet;
}

// The regex classes of the Basic Multilingual Plane, one byte each, filled
// from the generated table once (the hot path: no search per character).
struct BmpClasses {
  std::vector<RegexClass> cls;
  BmpClasses() : cls(0x10000) {
    for (char32_t c = 0; c < 0x10000; ++c) cls[c] = py_unicode::RegexClassOf(c);
  }
};

const BmpClasses& GetBmp() {
  static const BmpClasses* const kBmp = new BmpClasses();
  return *kBmp;
}

// Scans a well-formed prefix of the text one character at a time.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text), bmp_(GetBmp().cls.data()) {}

  // The character at byte `pos` (< size): its class and length, or 0 bytes
  // when the UTF-8 there is malformed.
  int At(size_t pos, RegexClass* cls) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text_.data());
    const unsigned char b = s[pos];
    if (b < 0x80) {
      *cls = bmp_[b];
      return 1;
    }
    // Well-formed 2- and 3-byte sequences inline; the rest (4 bytes,
    // anything malformed) through DecodeUtf8.
    const size_t left = text_.size() - pos;
    if (b >= 0xC2 && b < 0xE0 && left >= 2 && (s[pos + 1] & 0xC0) == 0x80) {
      *cls = bmp_[((b & 0x1Fu) << 6) | (s[pos + 1] & 0x3Fu)];
      return 2;
    }
    if (b >= 0xE0 && b < 0xF0 && left >= 3 && (s[pos + 1] & 0xC0) == 0x80 && (s[pos + 2] & 0xC0) == 0x80) {
      const char32_t cp = ((b & 0x0Fu) << 12) | ((s[pos + 1] & 0x3Fu) << 6) | (s[pos + 2] & 0x3Fu);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) {
        *cls = bmp_[cp];
        return 3;
      }
      return 0;
    }
    char32_t cp;
    const int n = DecodeUtf8(text_, pos, &cp);
    if (n > 0) *cls = cp < 0x10000 ? bmp_[cp] : py_unicode::RegexClassOf(cp);
    return n;
  }

  // End of the run of `cls` characters starting at `pos`; -1 on bad UTF-8.
  // `last` (optional) receives the start of the run's last character.
  int64_t RunEnd(size_t pos, RegexClass cls, size_t* last = nullptr) const {
    size_t p = pos;
    while (p < text_.size()) {
      RegexClass c;
      const int n = At(p, &c);
      if (n == 0) return -1;
      if (c != cls) break;
      if (last != nullptr) *last = p;
      p += n;
    }
    return static_cast<int64_t>(p);
  }

  // The length of a lower-case contraction ('s 't 're 've 'm 'll 'd) at
  // `pos` (text[pos] == '\''), or 0.
  size_t Contraction(size_t pos) const {
    const size_t left = text_.size() - pos - 1;
    if (left == 0) return 0;
    const char a = text_[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (left >= 2) {
      const char b = text_[pos + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
  }

 private:
  std::string_view text_;
  const RegexClass* bmp_;
};

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return GetAlphabet().cp[b]; }

std::string_view ByteToUnicodeUtf8(uint8_t b) { return GetAlphabet().utf8[b]; }

int UnicodeToByte(char32_t c) {
  if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) {
    return static_cast<int>(c);
  }
  if (c < 256 || c >= 256 + 68) return -1;
  // The 68 remapped bytes in increasing order.
  int k = static_cast<int>(c - 256);
  for (int b = 0; b < 256; ++b) {
    if (GetAlphabet().cp[b] >= 256 && k-- == 0) return b;
  }
  return -1;
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Alphabet& a = GetAlphabet();
  for (unsigned char b : bytes) out->append(a.utf8[b]);
}

absl::Status Gpt2PreTokenize(std::string_view text, std::vector<uint32_t>* bounds) {
  bounds->clear();
  bounds->push_back(0);
  const Scanner sc(text);
  const size_t n = text.size();
  size_t i = 0;
  auto bad = [&]() { return ValidateUtf8(text, "text"); };
  while (i < n) {
    RegexClass c0;
    const int len0 = sc.At(i, &c0);
    if (len0 == 0) return bad();
    int64_t end = -1;
    if (text[i] == '\'') {
      const size_t k = sc.Contraction(i);
      if (k > 0) end = static_cast<int64_t>(i + k);
    }
    if (end < 0 && text[i] == ' ' && i + 1 < n) {
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the space.
      RegexClass c1;
      const int len1 = sc.At(i + 1, &c1);
      if (len1 == 0) return bad();
      if (c1 != RegexClass::kSpace) end = sc.RunEnd(i + 1 + len1, c1);
    }
    if (end < 0 && c0 != RegexClass::kSpace) {
      end = sc.RunEnd(i + len0, c0);  // the same three without the space
    } else if (end < 0) {
      // \s+(?!\S): the run, less its last character when a non-space
      // follows; \s+ (one character) when that leaves nothing.
      size_t last = i;
      end = sc.RunEnd(i + len0, RegexClass::kSpace, &last);
      if (end >= 0 && static_cast<size_t>(end) < n && last > i) end = static_cast<int64_t>(last);
    }
    if (end < 0) return bad();
    bounds->push_back(static_cast<uint32_t>(end));
    i = static_cast<size_t>(end);
  }
  return absl::OkStatus();
}

bool Gpt2CutIsSafe(std::string_view text, size_t pos) {
  if (pos == 0 || pos >= text.size()) return false;
  const char c = text[pos];
  if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f') return false;
  // The character ending at pos: step back over continuation bytes.
  size_t start = pos - 1;
  while (start > 0 && pos - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  char32_t cp;
  if (DecodeUtf8(text, start, &cp) != static_cast<int>(pos - start)) return false;
  return py_unicode::RegexClassOf(cp) != RegexClass::kSpace;
}

}  // namespace dserve
