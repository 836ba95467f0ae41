// Invariants of Tokenizer outputs, shared by fuzz_tokenizer, fuzz_spm_model
// and the request fuzzers. Each aborts (FUZZ_CHECK) on a violation.
#pragma once

#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_common.h"

namespace dserve {
namespace fuzz {

inline void CheckIds(const Tokenizer& t, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id %d outside [0, %d)", id, t.vocab_size());
}

// An Encode / EncodePair result: parallel vectors, [CLS] first, [SEP] last,
// offsets inside the text each token came from, max_length respected.
inline void CheckEncoding(const Tokenizer& t, const Encoding& e, std::string_view first, std::string_view second,
                          bool pair, int max_length) {
  const size_t n = e.size();
  FUZZ_CHECK(e.type_ids.size() == n && e.sequence_ids.size() == n && e.offsets.size() == n,
             "ragged encoding: %zu ids, %zu type ids, %zu sequence ids, %zu offsets", n, e.type_ids.size(),
             e.sequence_ids.size(), e.offsets.size());
  FUZZ_CHECK(n >= (pair ? 3u : 2u), "%zu tokens", n);
  if (max_length > 0) FUZZ_CHECK(n <= static_cast<size_t>(max_length), "%zu tokens > max_length %d", n, max_length);
  FUZZ_CHECK(e.ids.front() == t.cls_id() && e.ids.back() == t.sep_id(), "not [CLS] ... [SEP]");
  CheckIds(t, e.ids);
  int specials = 0;
  for (size_t i = 0; i < n; ++i) {
    const ByteSpan off = e.offsets[i];
    FUZZ_CHECK(off.begin <= off.end, "token %zu: offsets [%u, %u)", i, off.begin, off.end);
    if (e.sequence_ids[i] < 0) {
      ++specials;
      FUZZ_CHECK(off.begin == 0 && off.end == 0, "special token %zu has offsets", i);
      continue;
    }
    FUZZ_CHECK(e.sequence_ids[i] == 0 || (pair && e.sequence_ids[i] == 1), "token %zu: sequence id %d", i,
               e.sequence_ids[i]);
    const std::string_view text = e.sequence_ids[i] == 0 ? first : second;
    FUZZ_CHECK(off.end <= text.size(), "token %zu: offsets [%u, %u) past the %zu-byte text", i, off.begin, off.end,
               text.size());
    FUZZ_CHECK(e.type_ids[i] == e.sequence_ids[i], "token %zu: type id %d, sequence %d", i, e.type_ids[i],
               e.sequence_ids[i]);
  }
  FUZZ_CHECK(specials == (pair ? 3 : 2), "%d special tokens", specials);
}

// Windows of (first, second): each within max_length, [CLS] first [SEP]
// chunk [SEP], chunks advancing and together covering the second text's
// tokens, offsets inside `second`.
inline void CheckWindows(const Tokenizer& t, const std::vector<Window>& windows, std::string_view second,
                         int max_length) {
  FUZZ_CHECK(!windows.empty(), "no windows");
  int previous_begin = -1, previous_end = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& win = windows[w];
    const size_t n = win.ids.size();
    FUZZ_CHECK(win.type_ids.size() == n && win.sequence_ids.size() == n && win.second_offsets.size() == n,
               "window %zu is ragged", w);
    FUZZ_CHECK(n <= static_cast<size_t>(max_length), "window %zu: %zu tokens > max_length %d", w, n, max_length);
    FUZZ_CHECK(n >= 3 && win.ids.front() == t.cls_id() && win.ids.back() == t.sep_id(), "window %zu layout", w);
    CheckIds(t, win.ids);
    FUZZ_CHECK(win.second_token_begin <= win.second_token_end, "window %zu: tokens [%d, %d)", w,
               win.second_token_begin, win.second_token_end);
    FUZZ_CHECK(win.second_token_begin > previous_begin, "window %zu does not advance (%d after %d)", w,
               win.second_token_begin, previous_begin);
    FUZZ_CHECK(win.second_token_begin <= previous_end, "window %zu leaves a gap (%d after %d)", w,
               win.second_token_begin, previous_end);
    int second_tokens = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto& off = win.second_offsets[i];
      FUZZ_CHECK(off.has_value() == (win.sequence_ids[i] == 1), "window %zu token %zu: offsets vs sequence", w, i);
      if (!off) continue;
      ++second_tokens;
      FUZZ_CHECK(off->begin <= off->end && off->end <= second.size(), "window %zu token %zu: [%u, %u) in %zu bytes",
                 w, i, off->begin, off->end, second.size());
    }
    FUZZ_CHECK(second_tokens == win.second_token_end - win.second_token_begin, "window %zu: %d second tokens for [%d, %d)",
               w, second_tokens, win.second_token_begin, win.second_token_end);
    previous_begin = win.second_token_begin;
    previous_end = win.second_token_end;
  }
  FUZZ_CHECK(windows.front().second_token_begin == 0, "the first window starts at token %d",
             windows.front().second_token_begin);
}

// Encoding fails exactly on invalid UTF-8.
inline void CheckUtf8Error(const absl::Status& s, std::string_view text) {
  const bool valid = ValidateUtf8(text).ok();
  FUZZ_CHECK(!valid, "valid UTF-8 failed to encode: %s", s.ToString().c_str());
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "unexpected code: %s", s.ToString().c_str());
}

}  // namespace fuzz
}  // namespace dserve
