// Resampling onto a common timebase: tones below the new Nyquist frequency survive, tones above it
// are filtered out instead of aliasing, gaps stay empty.
#include <catch2/catch.hpp>

#include <cmath>

#include "yard/railway/resample.h"

using namespace yard::railway;

namespace {
double rms(const Grid& g, size_t skip) {
  double s = 0;
  size_t n = 0;
  for (size_t i = skip; i + skip < g.values.size(); ++i)
    if (!std::isnan(g.values[i])) s += g.values[i] * g.values[i], ++n;
  return std::sqrt(s / n);
}
}  // namespace

TEST_CASE("anti-alias filtering before resampling", "[railway][resample]") {
  // 2.5 kHz source, 100 Hz grid (Nyquist 50 Hz).
  std::vector<double> t, low, high;
  for (int i = 0; i < 25000; ++i) {
    double x = i / 2500.0;
    t.push_back(x);
    low.push_back(std::sin(2 * M_PI * 5 * x));     // passes
    high.push_back(std::sin(2 * M_PI * 310 * x));  // would alias to 10 Hz without the filter
  }
  auto gl = resample(t, low, 100, 0, 9.9);
  auto gh = resample(t, high, 100, 0, 9.9);
  CHECK(rms(gl, 20) == Approx(1 / std::sqrt(2.0)).epsilon(0.05));
  CHECK(rms(gh, 20) < 0.01);
  // Zero phase: the 5 Hz tone is not delayed.
  CHECK(gl.values[500] == Approx(std::sin(2 * M_PI * 5 * 5.0)).margin(0.05));
}

TEST_CASE("gaps are left empty, not bridged", "[railway][resample]") {
  std::vector<double> t, v;
  for (int i = 0; i < 1000; ++i) {
    double x = i / 100.0;
    if (x > 4 && x < 6) continue;
    t.push_back(x);
    v.push_back(1.0);
  }
  auto g = resample(t, v, 50, 0, 9.9);
  CHECK(std::isnan(g.values[250]));  // t = 5 s
  CHECK(g.values[100] == Approx(1.0));
}
