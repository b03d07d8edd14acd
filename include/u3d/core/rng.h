// Counter-based random numbers: a stream is a pure function of (seed, a, b), so the data a step
// sees depends only on (seed, epoch, sample index), never on thread count or call order. This is
// what makes the batch stream identical for any number of workers and after a resume.
#pragma once
#include <cmath>
#include <cstdint>

namespace u3d {

// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t a = 0, uint64_t b = 0)
      : state_(mix64(mix64(seed) ^ mix64(a + 0x632BE59BD9B4E019ull) ^ mix64(b + 0x8CB92BA72F3D8DD7ull))) {}

  uint64_t next_u64() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n); n > 0. Multiply-shift: bias below 2^-64 * n.
  int64_t uniform_int(int64_t n) {
    return static_cast<int64_t>((static_cast<unsigned __int128>(next_u64()) * static_cast<uint64_t>(n)) >> 64);
  }
  bool bernoulli(double p) { return uniform() < p; }
  // Standard normal by Box-Muller (portable, unlike std::normal_distribution).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t state() const { return state_; }
  // Value number k (0, 1, ...) of the stream that starts at `state` (a fresh Rng's state()), without
  // drawing the ones before it: equal to the (k + 1)-th next_u64(). Lets a sample keep each random
  // choice at a fixed position, which vectorised (device) samplers compute directly.
  static constexpr uint64_t value_at(uint64_t state, uint64_t k) { return mix64(state + k * 0x9E3779B97F4A7C15ull); }

 private:
  uint64_t state_;
};

}  // namespace u3d
