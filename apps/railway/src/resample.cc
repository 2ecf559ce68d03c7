#include "yard/railway/resample.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace yard::railway {

namespace {
struct Lowpass {
  double b0, b1, b2, a1, a2;
  Lowpass(double f, double fs) {
    double w = 2 * M_PI * std::min(f, 0.49 * fs) / fs, c = std::cos(w), al = std::sin(w) / (2 * 0.7071), a0 = 1 + al;
    b0 = (1 - c) / 2 / a0, b1 = (1 - c) / a0, b2 = b0, a1 = -2 * c / a0, a2 = (1 - al) / a0;
  }
  void run(std::vector<double>& x, bool reverse) const {
    if (x.empty()) return;
    double z1 = 0, z2 = 0, x0 = reverse ? x.back() : x.front();
    // Start in steady state at the first value so the edge does not ring.
    double y0 = x0;
    z1 = y0 - b0 * x0;
    z2 = b2 * x0 - a2 * y0;
    z1 = b1 * x0 - a1 * y0 + z2;
    auto step = [&](double in) {
      double y = b0 * in + z1;
      z1 = b1 * in - a1 * y + z2;
      z2 = b2 * in - a2 * y;
      return y;
    };
    if (reverse)
      for (size_t i = x.size(); i-- > 0;) x[i] = step(x[i]);
    else
      for (auto& e : x) e = step(e);
  }
};
}  // namespace

Grid resample(const std::vector<double>& t, const std::vector<double>& v, double rate_hz, double t0, double t1,
              double cutoff_hz, double max_gap_s) {
  Grid g;
  g.start = t0;
  g.rate_hz = rate_hz;
  if (t.size() < 2 || t1 <= t0) return g;
  // The source rate sets the filter; the cut-off is below the grid's Nyquist frequency.
  double src_rate = (t.size() - 1) / std::max(1e-9, t.back() - t.front());
  double cutoff = cutoff_hz > 0 ? cutoff_hz : 0.4 * rate_hz;
  std::vector<double> f = v;
  if (cutoff < 0.45 * src_rate) {
    Lowpass lp(cutoff, src_rate);
    lp.run(f, false);
    lp.run(f, true);
  }
  size_t n = static_cast<size_t>((t1 - t0) * rate_hz) + 1;
  g.values.assign(n, std::numeric_limits<double>::quiet_NaN());
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    double x = t0 + i / rate_hz;
    while (k + 1 < t.size() && t[k + 1] <= x) ++k;
    if (k + 1 >= t.size() || x < t[k]) continue;
    if (t[k + 1] - t[k] > max_gap_s) continue;
    double a = (x - t[k]) / (t[k + 1] - t[k]);
    g.values[i] = f[k] + (f[k + 1] - f[k]) * a;
  }
  return g;
}

}  // namespace yard::railway
