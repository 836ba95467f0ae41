// Portable randomness for training data (issue 18, defect 4): the
// standard's engines are specified bit for bit, its distributions and
// std::shuffle are not (libstdc++ and libc++ differ). Everything that
// decides what data a step sees (order, masks, sentence swaps) draws through
// these, so a seed gives the same run on every machine.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace dserve {

// The generator and algorithm, recorded in trainer_state/state.json.
inline constexpr char kDataOrderGenerator[] = "mt19937_64, Fisher-Yates from the back, rejection-sampled indices";

// Uniform in [0, n), n > 0 (rejection, no modulo bias).
inline uint64_t UniformInt(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

// Uniform in [0, 1) with 53 random bits.
inline double UniformReal(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Fisher-Yates: for i = n-1 down to 1, swap v[i] with v[UniformInt(i + 1)].
template <typename T>
void PortableShuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformInt(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace dserve
