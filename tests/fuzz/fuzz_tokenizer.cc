// libFuzzer target: arbitrary bytes as text through the tokenizer of a fixed
// real SentencePiece model (the 300-piece nmt_nfkc model of the goldens):
// Encode, EncodePair, QA windows and rerank chunks, with each truncation
// mode, max_length and stride.
//
// Input: byte 0 flags (bits 0-1 truncation, bit 2 return_pieces, bit 3
// clamp_stride), byte 1 max_length (2 + b % 128; 255 = no limit), byte 2
// stride (b % 64), then the text. For pairs the text splits at its first
// 0xFF byte (never part of valid UTF-8) into first and second.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/tokenizer_checks.h"

namespace dserve {
namespace {

using fuzz::CheckEncoding;
using fuzz::CheckUtf8Error;
using fuzz::CheckWindows;

constexpr Truncation kTruncations[] = {Truncation::kNone, Truncation::kLongestFirst, Truncation::kOnlyFirst,
                                       Truncation::kOnlySecond};

bool Valid(std::string_view s) { return ValidateUtf8(s).ok(); }

void CheckWindowsResult(const Tokenizer& t, const absl::StatusOr<std::vector<Window>>& windows,
                        std::string_view first, std::string_view second, int max_length) {
  if (!windows.ok()) {
    FUZZ_CHECK(windows.status().code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s",
               windows.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(Valid(first) && Valid(second), "windows of invalid UTF-8");
  CheckWindows(t, *windows, second, max_length);
  std::vector<SpmPiece> pieces;
  FUZZ_CHECK(t.EncodeRaw(second, &pieces).ok(), "second text does not encode alone");
  FUZZ_CHECK(windows->back().second_token_end == static_cast<int>(pieces.size()),
             "the windows end at token %d of %zu", windows->back().second_token_end, pieces.size());
}

void Run(const uint8_t* data, size_t size) {
  if (size < 3) return;
  // Bit 4 of the first byte: ALBERT's text rules around the same model.
  const Tokenizer& t = (data[0] & 16) != 0 ? fuzz::FixedAlbertTokenizer() : fuzz::FixedTokenizer();
  const Truncation truncation = kTruncations[data[0] & 3];
  const bool with_pieces = (data[0] & 4) != 0;
  const bool clamp = (data[0] & 8) != 0;
  const int max_length = data[1] == 255 ? 0 : 2 + data[1] % 128;
  const int stride = data[2] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data + 3), size - 3);
  const size_t split = text.find('\xff');
  const std::string_view first = text.substr(0, split);
  const std::string_view second = split == std::string_view::npos ? std::string_view() : text.substr(split + 1);

  // Without a limit, encoding fails exactly on invalid UTF-8.
  EncodeOptions unlimited;
  unlimited.max_length = 0;
  unlimited.return_pieces = with_pieces;
  auto full = t.Encode(text, unlimited);
  if (!full.ok()) {
    CheckUtf8Error(full.status(), text);
  } else {
    CheckEncoding(t, *full, text, {}, false, 0);
    if (with_pieces) FUZZ_CHECK(full->pieces.size() == full->size(), "%zu pieces", full->pieces.size());
  }

  EncodeOptions options;
  options.max_length = max_length;
  options.truncation = truncation;
  auto single = t.Encode(text, options);
  if (single.ok()) {
    FUZZ_CHECK(full.ok(), "a limited encoding of text the unlimited one rejects");
    CheckEncoding(t, *single, text, {}, false, max_length);
    // Truncation keeps a prefix of the tokens.
    for (size_t i = 0; i + 1 < single->size(); ++i) {
      FUZZ_CHECK(single->ids[i] == full->ids[i], "truncated token %zu differs", i);
    }
  } else {
    FUZZ_CHECK(single.status().code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s",
               single.status().ToString().c_str());
    const bool may_fail = !full.ok() || truncation == Truncation::kNone || truncation == Truncation::kOnlySecond;
    FUZZ_CHECK(may_fail, "valid text failed with %s truncation: %s",
               truncation == Truncation::kLongestFirst ? "longest_first" : "only_first",
               single.status().ToString().c_str());
  }

  auto pair = t.EncodePair(first, second, options);
  if (pair.ok()) {
    FUZZ_CHECK(Valid(first) && Valid(second), "a pair of invalid UTF-8 encoded");
    CheckEncoding(t, *pair, first, second, true, max_length);
  } else {
    FUZZ_CHECK(pair.status().code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s",
               pair.status().ToString().c_str());
    const bool may_fail = !Valid(first) || !Valid(second) || truncation != Truncation::kLongestFirst ||
                          (max_length > 0 && max_length < 3);
    FUZZ_CHECK(may_fail, "valid pair failed with longest_first: %s", pair.status().ToString().c_str());
  }

  const int window_length = max_length == 0 ? 512 : max_length;
  CheckWindowsResult(t, t.EncodeQuestionContextWindows(first, second, window_length, stride, clamp), first, second,
                     window_length);
  CheckWindowsResult(t, t.EncodeQueryDocumentChunks(first, second, window_length, stride, clamp), first, second,
                     window_length);
}

}  // namespace
}  // namespace dserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dserve::fuzz::QuietLogs();
  (void)dserve::fuzz::FixedTokenizer();
  (void)dserve::fuzz::FixedAlbertTokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dserve::Run(data, size);
  return 0;
}
