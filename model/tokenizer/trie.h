// Byte tries used by the tokenizer.
//
// DartsCloneView reads the double array that SentencePiece stores inside a
// precompiled charsmap (darts-clone's unit format); PieceTrie is our own
// double array over vocabulary pieces, built once at load time. Both are
// immutable after construction and safe to query from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dserve {

// Read-only view of a darts-clone double array (units are little-endian
// uint32). Does not own the memory.
class DartsCloneView {
 public:
  DartsCloneView() = default;
  DartsCloneView(const uint32_t* units, size_t num_units)
      : units_(units), num_units_(num_units) {}

  bool empty() const { return num_units_ == 0; }

  // Longest key that is a prefix of `key`; returns its length in bytes (0 if
  // none) and stores its value in `*value`.
  size_t LongestPrefix(std::string_view key, uint32_t* value) const;

 private:
  const uint32_t* units_ = nullptr;
  size_t num_units_ = 0;
};

// A double-array trie mapping byte strings to non-negative int32 values.
class PieceTrie {
 public:
  static constexpr int32_t kRoot = 0;

  // `entries`: (key, value) pairs with unique, non-empty keys and values
  // >= 0. Fails on duplicates or empty keys.
  static absl::StatusOr<PieceTrie> Build(
      std::vector<std::pair<std::string, int32_t>> entries);

  PieceTrie() = default;

  bool empty() const { return units_.empty(); }

  // Moves from `node` along byte `c`. Returns the child node, or -1 if there
  // is no such edge.
  int32_t Child(int32_t node, unsigned char c) const {
    const int64_t next = static_cast<int64_t>(units_[node].base) + c;
    if (next >= static_cast<int64_t>(units_.size()) || units_[next].check != node) return -1;
    return static_cast<int32_t>(next);
  }

  // Value stored at `node` (a key ends there), or -1.
  int32_t Value(int32_t node) const { return units_[node].value; }

  // Exact lookup: value of `key` or -1.
  int32_t Find(std::string_view key) const;

  // Length of the longest key that is a prefix of `s` (0 if none).
  size_t LongestPrefix(std::string_view s) const;

  size_t num_units() const { return units_.size(); }

 private:
  struct Unit {
    int32_t base = 0;
    int32_t check = -1;
    int32_t value = -1;
  };
  std::vector<Unit> units_;
};

}  // namespace dserve
