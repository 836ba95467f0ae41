#include "model/tokenizer/trie.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dserve {

namespace {
// darts-clone unit accessors (see darts.h: DoubleArrayUnit).
inline bool HasLeaf(uint32_t u) { return (u >> 8) & 1; }
inline uint32_t UnitValue(uint32_t u) { return u & ((1U << 31) - 1); }
inline uint32_t Label(uint32_t u) { return u & ((1U << 31) | 0xFF); }
inline uint32_t Offset(uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }
}  // namespace

size_t DartsCloneView::LongestPrefix(std::string_view key, uint32_t* value) const {
  if (num_units_ == 0) return 0;
  size_t best = 0;
  uint32_t pos = 0;
  uint32_t unit = units_[pos];
  pos ^= Offset(unit);
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    pos ^= c;
    if (pos >= num_units_) return best;
    unit = units_[pos];
    if (Label(unit) != c) return best;
    pos ^= Offset(unit);
    if (HasLeaf(unit)) {
      if (pos >= num_units_) return best;
      best = i + 1;
      *value = UnitValue(units_[pos]);
    }
  }
  return best;
}

absl::StatusOr<PieceTrie> PieceTrie::Build(
    std::vector<std::pair<std::string, int32_t>> entries) {
  std::sort(entries.begin(), entries.end());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].first.empty()) return absl::InvalidArgumentError("empty trie key");
    if (i > 0 && entries[i].first == entries[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate piece '", entries[i].first, "'"));
    }
  }
  PieceTrie trie;
  // Free slots form a doubly linked list in ascending order so that the base
  // search visits only free slots; it gives up after kMaxScan candidates and
  // places the node past the end instead, which keeps the build O(n).
  constexpr int32_t kNil = -1;
  constexpr int kMaxScan = 256;
  std::vector<bool> used;
  std::vector<int32_t> next, prev;
  int32_t head = kNil, tail = kNil;
  auto grow = [&](size_t n) {
    if (n <= used.size()) return;
    const size_t old = used.size();
    const size_t m = std::max(n, old * 2);
    trie.units_.resize(m);
    used.resize(m, false);
    next.resize(m, kNil);
    prev.resize(m, kNil);
    for (size_t i = std::max<size_t>(old, 1); i < m; ++i) {  // slot 0 is the root
      const auto s = static_cast<int32_t>(i);
      prev[s] = tail;
      if (tail == kNil) head = s; else next[tail] = s;
      tail = s;
    }
  };
  auto take = [&](size_t slot) {
    const auto s = static_cast<int32_t>(slot);
    used[slot] = true;
    if (prev[s] == kNil) head = next[s]; else next[prev[s]] = next[s];
    if (next[s] == kNil) tail = prev[s]; else prev[next[s]] = prev[s];
  };
  grow(std::max<size_t>(1024, entries.size() * 2));
  used[0] = true;

  // Each task: a node covering entries[lo, hi) whose keys share `depth` bytes.
  struct Task {
    int32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Task> stack;
  if (!entries.empty()) stack.push_back({kRoot, 0, entries.size(), 0});
  std::vector<std::pair<unsigned char, std::pair<size_t, size_t>>> children;
  while (!stack.empty()) {
    const Task t = stack.back();
    stack.pop_back();
    size_t lo = t.lo;
    // Sorted order puts the key that ends here first.
    if (entries[lo].first.size() == t.depth) {
      trie.units_[t.node].value = entries[lo].second;
      ++lo;
    }
    children.clear();
    for (size_t i = lo; i < t.hi;) {
      const auto c = static_cast<unsigned char>(entries[i].first[t.depth]);
      size_t j = i + 1;
      while (j < t.hi && static_cast<unsigned char>(entries[j].first[t.depth]) == c) ++j;
      children.push_back({c, {i, j}});
      i = j;
    }
    if (children.empty()) continue;
    const size_t c0 = children.front().first;
    const size_t span = children.back().first - c0;
    size_t base = 0;
    bool found = false;
    int scanned = 0;
    for (int32_t f = head; f != kNil && scanned < kMaxScan; f = next[f], ++scanned) {
      if (static_cast<size_t>(f) < c0 + 1) continue;
      const size_t b = static_cast<size_t>(f) - c0;
      if (b + c0 + span >= used.size()) break;  // would need growth: use the end
      bool ok = true;
      for (const auto& ch : children) {
        if (used[b + ch.first]) {
          ok = false;
          break;
        }
      }
      if (ok) {
        base = b;
        found = true;
        break;
      }
    }
    if (!found) {
      base = used.size();
      grow(base + 256);
    }
    trie.units_[t.node].base = static_cast<int32_t>(base);
    for (const auto& ch : children) {
      const size_t slot = base + ch.first;
      take(slot);
      trie.units_[slot].check = t.node;
      stack.push_back({static_cast<int32_t>(slot), ch.second.first, ch.second.second, t.depth + 1});
    }
  }
  // Trim unused tail.
  size_t last = used.size();
  while (last > 1 && !used[last - 1]) --last;
  trie.units_.resize(std::max<size_t>(last + 256, 1));
  trie.units_.shrink_to_fit();
  return trie;
}

int32_t PieceTrie::Find(std::string_view key) const {
  if (units_.empty()) return -1;
  int32_t node = kRoot;
  for (char c : key) {
    node = Child(node, static_cast<unsigned char>(c));
    if (node < 0) return -1;
  }
  return Value(node);
}

size_t PieceTrie::LongestPrefix(std::string_view s) const {
  if (units_.empty()) return 0;
  size_t best = 0;
  int32_t node = kRoot;
  for (size_t i = 0; i < s.size(); ++i) {
    node = Child(node, static_cast<unsigned char>(s[i]));
    if (node < 0) break;
    if (Value(node) >= 0) best = i + 1;
  }
  return best;
}

}  // namespace dserve
