// Deterministic random numbers: the same seed gives the same sequence on every build (no
// library distributions, whose algorithms are implementation-defined).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace yard::railway {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  // A stream of its own for each (seed, name).
  Rng(uint64_t seed, const std::string& name) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    s_[0] = splitmix64(seed ^ h);
    s_[1] = splitmix64(s_[0]);
  }
  uint64_t next() {  // xorshift128+
    uint64_t a = s_[0];
    const uint64_t b = s_[1];
    s_[0] = b;
    a ^= a << 23;
    s_[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return s_[1] + b;
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  bool chance(double p) { return uniform() < p; }
  double normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    have_spare_ = true;
    return r * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t s_[2];
  bool have_spare_ = false;
  double spare_ = 0;
};

}  // namespace yard::railway
