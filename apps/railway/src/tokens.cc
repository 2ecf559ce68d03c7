// The distance-domain tokens of a log: axle-box vibration put on GNSS time and on the track, cut
// into bands and binned every 0.25 m.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "yard/railway/align.h"
#include "yard/railway/position.h"
#include "yard/railway/readers.h"
#include "yard/railway/shards.h"

namespace yard::railway {

namespace {

// RBJ biquad.
struct Biquad {
  double b0, b1, b2, a1, a2, z1 = 0, z2 = 0;
  static Biquad make(bool low, double f, double fs) {
    double w = 2 * M_PI * f / fs, c = std::cos(w), al = std::sin(w) / (2 * 0.7071);
    double a0 = 1 + al;
    Biquad q{};
    if (low) {
      q.b0 = (1 - c) / 2 / a0, q.b1 = (1 - c) / a0, q.b2 = (1 - c) / 2 / a0;
    } else {
      q.b0 = (1 + c) / 2 / a0, q.b1 = -(1 + c) / a0, q.b2 = (1 + c) / 2 / a0;
    }
    q.a1 = -2 * c / a0, q.a2 = (1 - al) / a0;
    return q;
  }
  double step(double x) {
    double y = b0 * x + z1;
    z1 = b1 * x - a1 * y + z2;
    z2 = b2 * x - a2 * y;
    return y;
  }
};

// A band between two corner frequencies (0: open), fourth order at each side.
struct Band {
  std::vector<Biquad> stages;
  Band(double lo, double hi, double fs) {
    for (int i = 0; i < 2; ++i) {
      if (lo > 0) stages.push_back(Biquad::make(false, lo, fs));
      if (hi > 0) stages.push_back(Biquad::make(true, hi, fs));
    }
  }
  double step(double x) {
    for (auto& s : stages) x = s.step(x);
    return x;
  }
};

constexpr int kBands = 5;
constexpr double kEdges[kBands + 1] = {0, 100, 220, 500, 850, 0};

struct Token {
  double sum2 = 0, band[kBands] = {}, band_peak[kBands] = {}, peak = 0, speed = 0;
  size_t env_peak_at = 0;  // the token's strongest moment: index into the envelope trace
  uint32_t n = 0;
};

// Where the train was: chainage against reference time (the smoothed along-track estimate) and the
// axle-box clock; or, unaligned, the raw odometer distance against the odometer's own clock.
struct Where {
  std::vector<double> t, s;
  std::optional<ClockFit> axle_clock;
};

Where locate(const std::string& dir, bool aligned, const PositionTrack* given_track, const ClockFit* given_axle) {
  Where w;
  if (aligned) {
    std::optional<std::map<std::string, ClockReport>> clocks;
    if (!given_track || !given_axle) clocks = align_clocks(dir, {}, false);
    std::optional<PositionTrack> own;
    if (!given_track) own = estimate_position(dir, *clocks);
    const PositionTrack& track = given_track ? *given_track : *own;
    w.t = track.t;
    w.s = track.s;
    if (given_axle) {
      w.axle_clock = *given_axle;
    } else {
      auto it = clocks->find("axlebox");
      if (it == clocks->end()) throw std::runtime_error(dir + ": no axlebox_pps.csv (the axle-box clock cannot be aligned)");
      w.axle_clock = it->second.fit;
    }
  } else {
    SensorCsvReader r(dir + "/odometer.csv");
    SensorRow row;
    while (r.next(row))
      if (row.values.size() >= 2) w.t.push_back(row.time), w.s.push_back(row.values[1]);
  }
  if (w.t.size() < 2) throw std::runtime_error(dir + ": no position track");
  return w;
}

// The second-impact feature of every token with samples: the high band's energy 2.5-6 ms after
// the impact that made the token's strongest moment (its own, or one up to 6 ms earlier that was
// stronger: the token may hold only a second strike) over the energy in the 2.5 ms from it (log).
void echo_features(const std::vector<Token>& tokens, const std::vector<float>& env, const std::vector<float>& hi2,
                   const std::vector<double>& at, std::vector<float>& echo) {
  echo.assign(tokens.size(), 0.f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& tk = tokens[i];
    if (tk.n == 0) continue;
    size_t from = tk.env_peak_at;
    const double peak_t = at[tk.env_peak_at];
    for (size_t j = tk.env_peak_at; j-- > 0 && peak_t - at[j] <= 0.006 && at[j] <= peak_t;)
      if (env[j] > env[from]) from = j;
    double early = 0, late = 0;
    for (size_t j = from; j < hi2.size(); ++j) {
      double dt = at[j] - at[from];
      if (dt > 0.006 || dt < 0) break;
      (dt < 0.0025 ? early : late) += hi2[j];
    }
    echo[i] = static_cast<float>(std::log((1e-4 + late) / (1e-4 + early)));
  }
}

}  // namespace

const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names = {
      "log_rms",        "log_e_lt100Hz",  "log_e_100_220Hz", "log_e_220_500Hz", "log_e_500_850Hz",
      "log_e_gt850Hz",  "log_pe_lt100Hz", "log_pe_100_220Hz", "log_pe_220_500Hz", "log_pe_500_850Hz",
      "log_pe_gt850Hz", "log_peak",       "speed_rel",        "echo"};
  return names;
}

TokenGrid build_tokens(const std::string& dir, bool aligned, const PositionTrack* given_track, const ClockFit* given_axle) {
  Where where = locate(dir, aligned, given_track, given_axle);
  const auto& pt = where.t;
  const auto& ps = where.s;
  auto s_at = [&](double t, size_t& k) {
    while (k + 1 < pt.size() && pt[k + 1] <= t) ++k;
    if (t <= pt.front() || k + 1 >= pt.size()) return -1.0;
    double f = (t - pt[k]) / std::max(1e-12, pt[k + 1] - pt[k]);
    return ps[k] + (ps[k + 1] - ps[k]) * f;
  };

  const double step = 0.25, fs = 2500;
  std::vector<Token> tokens;
  std::vector<float> env, hi2;  // the high band's smoothed and raw power, every sample on the track
  std::vector<double> at;
  ReadPolicy p;
  p.non_monotonic = OnBad::kDrop;
  SensorCsvReader r(dir + "/axlebox.csv", p);
  SensorRow row;
  std::optional<ClockMapper> mapper;
  if (where.axle_clock) mapper.emplace(*where.axle_clock);
  std::vector<Band> bands;
  for (int b = 0; b < kBands; ++b) bands.emplace_back(kEdges[b], kEdges[b + 1], fs);
  size_t k = 0;
  double prev_s = -1, prev_t = -1, smooth = 0, short_e[kBands] = {};
  const double kShort = 1 - std::exp(-1 / (fs * 0.003));  // 3 ms
  while (r.next(row)) {
    if (row.values.empty()) continue;
    double t = mapper ? mapper->map(row.time) : row.time;
    double a = row.values[0];
    double y[kBands];
    for (int b = 0; b < kBands; ++b) {
      y[b] = bands[b].step(a);
      short_e[b] += kShort * (y[b] * y[b] - short_e[b]);
    }
    smooth = 0.5 * smooth + 0.5 * y[kBands - 1] * y[kBands - 1];
    double s = s_at(t, k);
    if (s < 0) continue;
    size_t idx = static_cast<size_t>(s / step);
    if (idx >= tokens.size()) tokens.resize(idx + 1);
    auto& tk = tokens[idx];
    tk.sum2 += a * a;
    for (int b = 0; b < kBands; ++b) tk.band[b] += y[b] * y[b], tk.band_peak[b] = std::max(tk.band_peak[b], short_e[b]);
    tk.peak = std::max(tk.peak, std::abs(a));
    if (prev_t >= 0 && t > prev_t) tk.speed += std::max(0.0, (s - prev_s) / (t - prev_t));
    if (tk.n == 0 || smooth > env[tk.env_peak_at]) tk.env_peak_at = env.size();
    ++tk.n;
    hi2.push_back(static_cast<float>(y[kBands - 1] * y[kBands - 1]));
    env.push_back(static_cast<float>(smooth));
    at.push_back(t);
    prev_s = s, prev_t = t;
  }
  std::vector<float> echo;
  echo_features(tokens, env, hi2, at, echo);

  TokenGrid g;
  if (!at.empty()) g.first_s = at.front(), g.last_s = at.back();
  g.x.assign(tokens.size() * kFeatures, 0.f);
  g.count.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& tk = tokens[i];
    g.count[i] = tk.n;
    if (tk.n == 0) continue;
    float* f = &g.x[i * kFeatures];
    double inv = 1.0 / tk.n;
    f[kLogRms] = static_cast<float>(0.5 * std::log(1e-6 + tk.sum2 * inv));
    for (int b = 0; b < kBands; ++b) {
      f[kLogBelow100 + b] = static_cast<float>(std::log(1e-6 + tk.band[b] * inv));
      f[kPeakBelow100 + b] = static_cast<float>(std::log(1e-6 + tk.band_peak[b]));
    }
    f[kLogPeak] = static_cast<float>(std::log(1e-6 + tk.peak));
    f[kSpeed] = static_cast<float>(tk.speed * inv / 44.4);
    f[kEcho] = echo[i];
  }
  return g;
}

}  // namespace yard::railway
