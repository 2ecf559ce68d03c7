// Resampling a sensor stream, already on the reference timebase, onto a common grid: a zero-phase
// low-pass (a Butterworth biquad run forwards then backwards, cut-off below the grid's Nyquist
// frequency) against aliasing, then linear interpolation at the grid times. Gaps longer than
// `max_gap_s` are left empty (NaN) instead of being bridged.
#pragma once

#include <vector>

namespace yard::railway {

struct Grid {
  double start = 0, rate_hz = 100;
  std::vector<double> values;  // values[i] at start + i / rate_hz; NaN inside gaps
};

// t must be increasing. cutoff_hz defaults to 0.4 x the grid rate.
Grid resample(const std::vector<double>& t, const std::vector<double>& v, double rate_hz, double t0, double t1,
              double cutoff_hz = 0, double max_gap_s = 0.5);

}  // namespace yard::railway
