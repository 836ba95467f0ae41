#include "model/tokenizer/py_unicode.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace dserve::py_unicode {

namespace {

struct CodepointRange {
  char32_t lo, hi;  // inclusive
};

// lo + k * stride maps to lo + k * stride + delta, for k < count.
struct DeltaRun {
  char32_t lo;
  uint16_t count;
  uint8_t stride;
  int32_t delta;
};

// cp maps to data[offset, offset + count).
struct MultiMapping {
  char32_t cp;
  uint16_t offset;
  uint8_t count;
};

struct ClassRange {
  char32_t lo, hi;  // inclusive
  unsigned char cls;  // RegexClass
};

#include "model/tokenizer/py_unicode_tables.inc"

static_assert(kGeneratedMaxMapped <= kMaxMapped, "regenerate with a larger kMaxMapped");

constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

template <size_t N>
bool InRanges(const CodepointRange (&table)[N], char32_t c) {
  const CodepointRange* end = table + N;
  const CodepointRange* it =
      std::upper_bound(table, end, c, [](char32_t v, const CodepointRange& r) { return v < r.lo; });
  return it != table && c <= std::prev(it)->hi;
}

// The run holding `c`, or nullptr.
template <size_t N>
const DeltaRun* FindRun(const DeltaRun (&table)[N], char32_t c) {
  const DeltaRun* end = table + N;
  const DeltaRun* it =
      std::upper_bound(table, end, c, [](char32_t v, const DeltaRun& r) { return v < r.lo; });
  if (it == table) return nullptr;
  const DeltaRun* run = std::prev(it);
  const char32_t k = c - run->lo;
  if (k % run->stride != 0 || k / run->stride >= run->count) return nullptr;
  return run;
}

template <size_t N>
const MultiMapping* FindMulti(const MultiMapping (&table)[N], char32_t c) {
  const MultiMapping* end = table + N;
  const MultiMapping* it =
      std::lower_bound(table, end, c, [](const MultiMapping& m, char32_t v) { return m.cp < v; });
  return it != end && it->cp == c ? it : nullptr;
}

// Looks `c` up in a pair of (runs, multi) tables; identity when absent.
template <size_t R, size_t M, size_t D>
int MapCodepoint(const DeltaRun (&runs)[R], const MultiMapping (&multi)[M],
                 const char32_t (&data)[D], char32_t c, char32_t* out) {
  if (const DeltaRun* run = FindRun(runs, c)) {
    out[0] = static_cast<char32_t>(static_cast<int32_t>(c) + run->delta);
    return 1;
  }
  if (const MultiMapping* m = FindMulti(multi, c)) {
    std::copy(data + m->offset, data + m->offset + m->count, out);
    return m->count;
  }
  out[0] = c;
  return 1;
}

}  // namespace

std::string_view UnidataVersion() { return kUnidataVersion; }

bool IsSpace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return InRanges(kSpaceRanges, c);
}

bool IsDigit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return InRanges(kDigitRanges, c);
}

bool IsCombining(char32_t c) { return c >= 0x300 && InRanges(kCombiningRanges, c); }

int DecomposeStripped(char32_t c, char32_t out[kMaxMapped]) {
  if (c < 0xA0) {
    out[0] = c;
    return 1;
  }
  if (c >= kHangulFirst && c <= kHangulLast) {
    const char32_t s = c - kHangulFirst;
    out[0] = 0x1100 + s / 588;
    out[1] = 0x1161 + (s % 588) / 28;
    if (s % 28 == 0) return 2;
    out[2] = 0x11A7 + s % 28;
    return 3;
  }
  if (IsCombining(c)) return 0;
  return MapCodepoint(kStrippedRuns, kStrippedMulti, kStrippedData, c, out);
}

int LowerFull(char32_t c, char32_t out[kMaxMapped]) {
  if (c < 0x80) {
    out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return 1;
  }
  return MapCodepoint(kLowerRuns, kLowerMulti, kLowerData, c, out);
}

SigmaContext SigmaContextOf(char32_t c) {
  if (InRanges(kCaseIgnorableRanges, c)) return SigmaContext::kCaseIgnorable;
  if (InRanges(kCasedRanges, c)) return SigmaContext::kCased;
  return SigmaContext::kOther;
}

RegexClass RegexClassOf(char32_t c) {
  constexpr const ClassRange* kEnd = kRegexClassRanges + std::size(kRegexClassRanges);
  const ClassRange* it = std::upper_bound(kRegexClassRanges, kEnd, c,
                                          [](char32_t v, const ClassRange& r) { return v < r.lo; });
  if (it == kRegexClassRanges) return RegexClass::kOther;
  --it;
  return c <= it->hi ? static_cast<RegexClass>(it->cls) : RegexClass::kOther;
}

std::string_view RegexModuleVersion() { return kRegexModuleVersion; }

}  // namespace dserve::py_unicode
