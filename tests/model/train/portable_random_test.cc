// model/train/portable_random.h (issue 18, defect 4): a seed gives the same
// data order on every machine. The expected permutations come from an
// independent Python mt19937_64 + Fisher-Yates
// (portable_shuffle_oracle.py, run by ctest as train.portable_shuffle_oracle);
// std::shuffle, which the trainer used before, gives other orders (and
// different ones under libc++).
#include "model/train/portable_random.h"

#include <numeric>

#include <gtest/gtest.h>

namespace dserve {
namespace {

std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(PortableShuffle, MatchesTheIndependentOracle) {
  std::mt19937_64 a(3);
  std::vector<int> v = Iota(10);
  PortableShuffle(v, a);
  EXPECT_EQ(v, (std::vector<int>{1, 6, 0, 4, 8, 5, 2, 3, 9, 7}));
  std::mt19937_64 b(42);
  v = Iota(30);
  PortableShuffle(v, b);
  EXPECT_EQ(v, (std::vector<int>{5,  4,  22, 7,  17, 27, 8, 11, 25, 21, 14, 1,  9,  20, 2,
                                 13, 29, 0,  23, 15, 10, 12, 18, 16, 3, 19, 24, 28, 26, 6}));
}

TEST(PortableShuffle, TheGeneratorCarriesOverToTheNextEpoch) {
  std::mt19937_64 rng(7);
  std::vector<int> first = Iota(5);
  PortableShuffle(first, rng);
  std::vector<int> second = Iota(12);
  PortableShuffle(second, rng);
  EXPECT_EQ(second, (std::vector<int>{6, 2, 5, 3, 0, 4, 7, 8, 11, 9, 10, 1}));
}

TEST(PortableShuffle, UniformIntStaysInRangeAndEmptyOrSingleIsUntouched) {
  std::mt19937_64 rng(1);
  for (uint64_t n : {1ULL, 2ULL, 3ULL, 1000003ULL, (1ULL << 63) + 5}) {
    for (int i = 0; i < 100; ++i) EXPECT_LT(UniformInt(rng, n), n);
  }
  std::vector<int> empty, one{9};
  PortableShuffle(empty, rng);
  PortableShuffle(one, rng);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(one, std::vector<int>{9});
}

}  // namespace
}  // namespace dserve
