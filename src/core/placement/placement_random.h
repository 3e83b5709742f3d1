#pragma once

// A small seeded random generator for placement decisions and replays. Its
// sequence is fixed by this file (unlike std:: distributions, which differ
// between standard libraries), so a seed reproduces a replay bit for bit on
// any platform.

#include <cstdint>

namespace gpuslice::core {

// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, passes BigCrush, tiny.
class PlacementRng {
 public:
  explicit PlacementRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n); n > 0. Multiply-shift keeps the bias below 2^-32
  // for the n (< 2^32) used here.
  uint32_t Uniform(uint32_t n) {
    return static_cast<uint32_t>(((Next() >> 32) * uint64_t{n}) >> 32);
  }

 private:
  uint64_t state_;
};

}  // namespace gpuslice::core
