#include "model/tokenizer/utf8.h"

#include <string>

#include "absl/strings/str_format.h"

namespace dserve {

int DecodeUtf8(std::string_view s, size_t pos, char32_t* cp) {
  const size_t left = s.size() - pos;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + pos);
  const unsigned char c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  auto cont = [&](size_t i) { return (p[i] & 0xC0) == 0x80; };
  if ((c & 0xE0) == 0xC0) {
    if (left < 2 || !cont(1)) return 0;
    const char32_t v = ((c & 0x1F) << 6) | (p[1] & 0x3F);
    if (v < 0x80) return 0;
    *cp = v;
    return 2;
  }
  if ((c & 0xF0) == 0xE0) {
    if (left < 3 || !cont(1) || !cont(2)) return 0;
    const char32_t v = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v < 0xE000)) return 0;
    *cp = v;
    return 3;
  }
  if ((c & 0xF8) == 0xF0) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    const char32_t v = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) |
                       ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return 0;
    *cp = v;
    return 4;
  }
  return 0;
}

absl::Status ValidateUtf8(std::string_view s, std::string_view what) {
  size_t pos = 0;
  while (pos < s.size()) {
    // Fast path for ASCII runs.
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    char32_t cp;
    const int n = DecodeUtf8(s, pos, &cp);
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: invalid UTF-8 at byte %d (0x%02X)", what, pos,
          static_cast<unsigned char>(s[pos])));
    }
    pos += n;
  }
  return absl::OkStatus();
}

size_t CountCodepoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

CodepointIndex::CodepointIndex(std::string_view text) : cp_at_byte_(text.size() + 1) {
  uint32_t cp = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    // A continuation byte belongs to the code point started before it.
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      cp_at_byte_[i] = cp++;
    } else {
      cp_at_byte_[i] = cp - 1;
    }
  }
  cp_at_byte_[text.size()] = cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace dserve
