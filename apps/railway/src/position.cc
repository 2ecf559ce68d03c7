#include "yard/railway/position.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "yard/railway/align.h"
#include "yard/railway/nmea.h"
#include "yard/railway/readers.h"
#include "yard/railway/sim.h"

namespace yard::railway {

namespace {
constexpr double kG = 9.81;

struct Series {
  std::vector<double> t, v;
  double at(double x) const {
    if (t.empty()) return 0;
    auto it = std::lower_bound(t.begin(), t.end(), x);
    if (it == t.begin()) return v.front();
    if (it == t.end()) return v.back();
    size_t i = static_cast<size_t>(it - t.begin());
    double f = (x - t[i - 1]) / std::max(1e-12, t[i] - t[i - 1]);
    return v[i - 1] + (v[i] - v[i - 1]) * f;
  }
};

// Lag (odometer local minus reference) maximising the normalised correlation between the GNSS
// speeds at their epochs in [t0, t1) and the odometer speed interpolated at epoch + lag, searched
// in [lo, hi]; nullopt when the window carries too little signal (nearly constant speed).
std::optional<double> best_lag(const Series& ref, const Series& odo, double t0, double t1, double lo, double hi, double step) {
  std::vector<double> tt, g;
  for (size_t i = static_cast<size_t>(std::lower_bound(ref.t.begin(), ref.t.end(), t0) - ref.t.begin());
       i < ref.t.size() && ref.t[i] < t1; ++i) {
    tt.push_back(ref.t[i]);
    g.push_back(ref.v[i]);
  }
  if (g.size() < 20) return std::nullopt;
  double mean = 0;
  for (double x : g) mean += x;
  mean /= g.size();
  double var = 0;
  for (double x : g) var += (x - mean) * (x - mean);
  if (var / g.size() < 0.5 * 0.5) return std::nullopt;
  auto score = [&](double lag) {
    double mo = 0;
    std::vector<double> o(g.size());
    for (size_t i = 0; i < g.size(); ++i) mo += (o[i] = odo.at(tt[i] + lag));
    mo /= g.size();
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      num += (g[i] - mean) * (o[i] - mo);
      den += (o[i] - mo) * (o[i] - mo);
    }
    return den > 0 ? num / std::sqrt(den * var) : -1.0;
  };
  double best = lo, best_s = -2;
  for (double lag = lo; lag <= hi; lag += step) {
    double sc = score(lag);
    if (sc > best_s) best_s = sc, best = lag;
  }
  if (best_s < 0.95) return std::nullopt;
  double a = score(best - step), c = score(best + step);
  double den = a - 2 * best_s + c;
  if (den < 0) best += 0.5 * step * (a - c) / den;
  return best;
}

struct Event {
  double t;
  int kind;  // 0 imu, 1 odometer, 2 gnss, 3 balise
  size_t i;
};

}  // namespace

double TrackGeometry::gradient(double s) const {
  double g = 0;
  for (auto& [start, v] : gradients)
    if (s >= start) g = v.first;
  return g;
}

double TrackGeometry::project(double px, double py, double hint, double window, double* lateral) const {
  size_t lo = 0, hi = chainage.size() - 1;
  if (hint >= 0) {
    lo = static_cast<size_t>(std::lower_bound(chainage.begin(), chainage.end(), hint - window) - chainage.begin());
    hi = static_cast<size_t>(std::lower_bound(chainage.begin(), chainage.end(), hint + window) - chainage.begin());
    lo = lo > 0 ? lo - 1 : 0;
    hi = std::min(hi, chainage.size() - 1);
  }
  double best_d = 1e300, best_s = hint;
  for (size_t i = lo; i < hi; ++i) {
    double ax = x[i], ay = y[i], bx = x[i + 1], by = y[i + 1];
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    double f = len2 > 0 ? std::clamp(((px - ax) * dx + (py - ay) * dy) / len2, 0.0, 1.0) : 0.0;
    double qx = ax + f * dx - px, qy = ay + f * dy - py;
    double d = qx * qx + qy * qy;
    if (d < best_d) best_d = d, best_s = chainage[i] + f * (chainage[i + 1] - chainage[i]);
  }
  if (lateral) *lateral = std::sqrt(best_d);
  return best_s;
}

std::pair<double, double> TrackGeometry::point_at(double s) const {
  size_t k = static_cast<size_t>(std::upper_bound(chainage.begin(), chainage.end(), s) - chainage.begin());
  k = std::clamp<size_t>(k, 1, chainage.size() - 1);
  double f = std::clamp((s - chainage[k - 1]) / std::max(1e-9, chainage[k] - chainage[k - 1]), 0.0, 1.0);
  return {x[k - 1] + (x[k] - x[k - 1]) * f, y[k - 1] + (y[k] - y[k - 1]) * f};
}

TrackGeometry TrackGeometry::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto j = nlohmann::json::parse(in);
  TrackGeometry g;
  for (auto& p : j.at("polyline")) {
    g.chainage.push_back(p[0]);
    g.x.push_back(p[1]);
    g.y.push_back(p[2]);
  }
  for (auto& b : j.at("balises")) g.balises.emplace_back(b.at("id"), b.at("chainage"));
  for (auto& gr : j.at("gradients")) g.gradients.push_back({gr.at("start").get<double>(), {gr.at("permille").get<double>(), 0}});
  for (auto& k : j.value("km_posts", nlohmann::json::array())) g.km_posts.push_back(k);
  if (j.contains("origin")) g.origin = PlaneOrigin{j["origin"].at("lat"), j["origin"].at("lon")};
  if (g.chainage.size() < 2) throw std::runtime_error(path + ": the polyline has fewer than 2 points");
  return g;
}

PositionTrack estimate_position(const std::string& dir) {
  // The track comes first: without it there is nothing to align to.
  if (!std::filesystem::exists(dir + "/line.json")) throw std::runtime_error("cannot read " + dir + "/line.json");
  return estimate_position(dir, align_clocks(dir));
}

namespace {

using Fixes = std::vector<std::array<double, 4>>;  // GPS time, x, y, speed
using Samples = std::vector<std::array<double, 2>>;  // time, value

// GNSS fixes at their GPS time, in time order.
Fixes read_gnss(const std::string& dir, const TrackGeometry& geo) {
  Fixes gnss;
  auto fixes = read_gnss_fixes(dir, geo.origin);
  for (auto& f : fixes.fixes) gnss.push_back({f.utc, f.x, f.y, f.speed_mps});
  std::sort(gnss.begin(), gnss.end());
  if (gnss.size() < 10) throw std::runtime_error(fixes.source + ": fewer than 10 GNSS fixes");
  return gnss;
}

// A sensor's first value at each record's time (mapped by `map`), in file order.
template <class Map>
Samples read_first_values(const std::string& path, Map&& map) {
  ReadPolicy p;
  p.non_monotonic = OnBad::kDrop;  // keep file order across clock steps; swapped pairs are few
  SensorCsvReader r(path, p);
  SensorRow row;
  Samples out;
  while (r.next(row))
    if (!row.values.empty()) out.push_back({map(row.time), row.values[0]});
  return out;
}

// The odometer's clock, from its speed cross-correlated against GNSS speed: a coarse lag over
// windows of up to 300 s, then fine lags over disjoint 40 s windows around it.
ClockFit odometer_clock(const std::string& dir, const Fixes& gnss, const Samples& odo) {
  Series gspeed, ospeed;
  for (auto& f : gnss) gspeed.t.push_back(f[0]), gspeed.v.push_back(f[3]);
  for (auto& o : odo) ospeed.t.push_back(o[0]), ospeed.v.push_back(o[1]);
  double t_end = gnss.back()[0];
  std::optional<double> coarse;
  double coarse_win = std::min(300.0, t_end - gnss.front()[0]);
  for (double w = gnss.front()[0]; w + coarse_win <= t_end + 1e-9 && !coarse; w += coarse_win / 2)
    coarse = best_lag(gspeed, ospeed, w, w + coarse_win, -10, 10, 0.1);
  if (!coarse) throw std::runtime_error(dir + ": the odometer never correlates with GNSS speed");
  // Fine lags per window, searched around the coarse one (wide enough for drift and steps).
  std::vector<std::pair<double, double>> pairs;
  double win = 40, hop = 40;  // disjoint windows: independent errors, which the fit assumes
  for (double w = 0; w + win <= t_end; w += hop) {
    auto lag = best_lag(gspeed, ospeed, w, w + win, *coarse - 0.8, *coarse + 0.8, 0.005);
    if (lag) pairs.emplace_back(w + win / 2 + *lag, w + win / 2);
  }
  if (pairs.size() >= 10) return fit_clock(pairs);
  // A short run: too few windows for a drift; one offset (the median lag) is what it supports.
  std::vector<double> lags{*coarse};
  for (auto& [l, r] : pairs) lags.push_back(l - r);
  std::nth_element(lags.begin(), lags.begin() + lags.size() / 2, lags.end());
  ClockFit one;
  one.segments.push_back({0, t_end, lags[lags.size() / 2]});
  return one;
}

// Balise detections on the reference timebase, with the chainage each balise is known at.
std::vector<std::pair<double, double>> read_balises(const std::string& dir, const std::map<std::string, ClockReport>& clocks,
                                                    const TrackGeometry& geo) {
  std::vector<std::pair<double, double>> bal;  // t, chainage
  auto it = clocks.find("balise");
  if (it == clocks.end()) return bal;
  ClockMapper m(it->second.fit);
  SensorCsvReader r(dir + "/balise.csv");
  SensorRow row;
  while (r.next(row)) {
    auto b = std::find_if(geo.balises.begin(), geo.balises.end(), [&](auto& x) { return x.first == row.text; });
    if (b != geo.balises.end()) bal.emplace_back(m.map(row.time), b->second);
  }
  return bal;
}

// Every sensor's measurements on the reference timebase.
struct Measured {
  Fixes gnss;
  Samples imu;      // t, longitudinal acceleration
  Samples odo_ref;  // t, speed
  std::vector<std::pair<double, double>> bal;  // t, chainage

  // All of them as events in time order (a stable sort: IMU, odometer, GNSS, balise at a tie).
  std::vector<Event> events() const {
    std::vector<Event> ev;
    for (size_t i = 0; i < imu.size(); ++i) ev.push_back({imu[i][0], 0, i});
    for (size_t i = 0; i < odo_ref.size(); ++i) ev.push_back({odo_ref[i][0], 1, i});
    for (size_t i = 0; i < gnss.size(); ++i) ev.push_back({gnss[i][0], 2, i});
    for (size_t i = 0; i < bal.size(); ++i) ev.push_back({bal[i].first, 3, i});
    std::stable_sort(ev.begin(), ev.end(), [](auto& a, auto& b) { return a.t < b.t; });
    return ev;
  }
};

// A Kalman filter over [chainage, speed, odometer scale]: the IMU's acceleration (less the
// gradient) drives the prediction; odometer speeds (gated: slip and slide are found and skipped),
// GNSS fixes projected on the track (gated by the lateral distance and the innovation) and balises
// update it. Every update event keeps its prior and posterior for the smoother.
class PositionFilter {
 public:
  struct Step {
    double t;
    double xp[3], Pp[3][3], xf[3], Pf[3][3];
    bool odo;
  };
  PositionFilter(const TrackGeometry& geo, const Measured& m, PositionTrack& out) : geo_(geo), m_(m), out_(out) {
    X_[0] = geo.project(m.gnss[0][1], m.gnss[0][2], -1, 0, &lateral_);
    X_[1] = m.gnss[0][3];
    X_[2] = 1.0;
    t_ = m.gnss[0][0];
  }
  void run(const std::vector<Event>& ev) {
    steps_.reserve(ev.size() / 8);
    for (auto& e : ev) {
      if (e.t < t_) continue;
      predict(e.t);
      if (e.kind != 0) begin_step(e.t, e.kind == 1);
      measure(e);
      if (e.kind != 0) end_step();
    }
    if (slipping_) out_.slips.emplace_back(slip_start_, slip_last_);
  }
  const std::vector<Step>& steps() const { return steps_; }

 private:
  void predict(double to) {
    double dt = to - t_;
    if (dt <= 0) return;
    X_[0] += X_[1] * dt + 0.5 * accel_ * dt * dt;
    X_[1] += accel_ * dt;
    if (X_[1] < 0) X_[1] = 0;
    // P = F P F' + Q, F = [[1,dt,0],[0,1,0],[0,0,1]]
    double p00 = P_[0][0] + dt * (P_[1][0] + P_[0][1]) + dt * dt * P_[1][1];
    double p01 = P_[0][1] + dt * P_[1][1], p02 = P_[0][2] + dt * P_[1][2];
    P_[0][0] = p00 + kQAcc * dt * dt * dt / 3;
    P_[0][1] = P_[1][0] = p01 + kQAcc * dt * dt / 2;
    P_[0][2] = P_[2][0] = p02;
    P_[1][1] += kQAcc * dt;
    P_[2][2] += kQScale * dt;
    t_ = to;
  }
  // Scalar update with measurement row H.
  void update(const double H[3], double y, double R) {
    double PH[3];
    for (int i = 0; i < 3; ++i) PH[i] = P_[i][0] * H[0] + P_[i][1] * H[1] + P_[i][2] * H[2];
    double S = H[0] * PH[0] + H[1] * PH[1] + H[2] * PH[2] + R;
    double K[3] = {PH[0] / S, PH[1] / S, PH[2] / S};
    for (int i = 0; i < 3; ++i) X_[i] += K[i] * y;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) P_[i][j] -= K[i] * PH[j];
  }
  void begin_step(double when, bool odo) {
    Step st;
    st.t = when;
    st.odo = odo;
    std::copy(X_, X_ + 3, st.xp);
    std::copy(&P_[0][0], &P_[0][0] + 9, &st.Pp[0][0]);
    steps_.push_back(st);
  }
  void end_step() {
    std::copy(X_, X_ + 3, steps_.back().xf);
    std::copy(&P_[0][0], &P_[0][0] + 9, &steps_.back().Pf[0][0]);
  }
  // One measurement event: an update, or none (a rejected one).
  void measure(const Event& e) {
    if (e.kind == 0) accel_ = m_.imu[e.i][1] - kG * geo_.gradient(X_[0]) / 1000.0;
    else if (e.kind == 1) on_odometer(e);
    else if (e.kind == 2) on_gnss(m_.gnss[e.i]);
    else on_balise(m_.bal[e.i].second);
  }
  // Two suspicious speeds in a row start a slip (or slide); three calm ones, or 8 s, end it.
  void on_odometer(const Event& e) {
    double z = m_.odo_ref[e.i][1];
    double y = z - X_[2] * X_[1];
    double gate = std::max(0.15, 0.025 * X_[1]);
    bool bad = std::abs(y) > gate;
    if (bad) {
      ++suspicious_;
      calm_ = 0;
    } else {
      suspicious_ = 0;
      ++calm_;
    }
    if (!slipping_ && suspicious_ >= 2) {
      slipping_ = true;
      slip_start_ = e.t - 0.05;
    }
    if (slipping_ && (calm_ >= 3 || e.t - slip_start_ > 8)) {
      slipping_ = false;
      out_.slips.emplace_back(slip_start_, slip_last_);
      suspicious_ = 0;
    }
    if (bad) slip_last_ = e.t;
    if (!slipping_ && !bad) {
      double H[3] = {0, X_[2], X_[1]};
      update(H, y, 0.03 * 0.03);
    }
  }
  void on_gnss(const std::array<double, 4>& f) {
    double s = geo_.project(f[1], f[2], X_[0], 300, &lateral_);
    double y = s - X_[0];
    double R = 1.5 * 1.5;
    if (lateral_ > 6 || std::abs(y) > 4 * std::sqrt(P_[0][0] + R) + 2) {
      ++out_.gnss_rejected;
      return;
    }
    double Hs[3] = {1, 0, 0};
    update(Hs, y, R);
    double Hv[3] = {0, 1, 0};
    update(Hv, f[3] - X_[1], 0.1 * 0.1);
    ++out_.gnss_used;
  }
  void on_balise(double chainage) {
    double y = chainage - X_[0];
    if (std::abs(y) > 50) return;
    double H[3] = {1, 0, 0};
    update(H, y, 0.6 * 0.6);
    ++out_.balises_used;
  }

  static constexpr double kQAcc = 0.05, kQScale = 1e-9;
  const TrackGeometry& geo_;
  const Measured& m_;
  PositionTrack& out_;
  double X_[3];
  double P_[3][3] = {{25, 0, 0}, {0, 1, 0}, {0, 0, 1e-3}};
  double t_ = 0, accel_ = 0, lateral_ = 0;
  bool slipping_ = false;
  int calm_ = 0, suspicious_ = 0;
  double slip_start_ = 0, slip_last_ = 0;
  std::vector<Step> steps_;
};

bool inv3(const double m[3][3], double r[3][3]) {
  double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
               m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  if (std::abs(det) < 1e-300) return false;
  r[0][0] = (m[1][1] * m[2][2] - m[1][2] * m[2][1]) / det;
  r[0][1] = (m[0][2] * m[2][1] - m[0][1] * m[2][2]) / det;
  r[0][2] = (m[0][1] * m[1][2] - m[0][2] * m[1][1]) / det;
  r[1][0] = (m[1][2] * m[2][0] - m[1][0] * m[2][2]) / det;
  r[1][1] = (m[0][0] * m[2][2] - m[0][2] * m[2][0]) / det;
  r[1][2] = (m[0][2] * m[1][0] - m[0][0] * m[1][2]) / det;
  r[2][0] = (m[1][0] * m[2][1] - m[1][1] * m[2][0]) / det;
  r[2][1] = (m[0][1] * m[2][0] - m[0][0] * m[2][1]) / det;
  r[2][2] = (m[0][0] * m[1][1] - m[0][1] * m[1][0]) / det;
  return true;
}

// Rauch-Tung-Striebel smoothing backwards over the filter's steps: the aligner works offline, so
// every estimate can use the measurements after it too (what bridges tunnels best).
std::vector<std::array<double, 3>> smooth(const std::vector<PositionFilter::Step>& steps) {
  std::vector<std::array<double, 3>> xs(steps.size());
  if (steps.empty()) return xs;
  std::copy(steps.back().xf, steps.back().xf + 3, xs.back().begin());
  for (size_t k = steps.size() - 1; k-- > 0;) {
    const auto& a = steps[k];
    const auto& b = steps[k + 1];
    double T = b.t - a.t;
    double F[3][3] = {{1, T, 0}, {0, 1, 0}, {0, 0, 1}};
    double PF[3][3] = {};  // Pf_k F'
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int q = 0; q < 3; ++q) PF[i][j] += a.Pf[i][q] * F[j][q];
    double Pinv[3][3];
    if (!inv3(b.Pp, Pinv)) {
      std::copy(a.xf, a.xf + 3, xs[k].begin());
      continue;
    }
    double C[3][3] = {};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int q = 0; q < 3; ++q) C[i][j] += PF[i][q] * Pinv[q][j];
    for (int i = 0; i < 3; ++i) {
      double d = 0;
      for (int j = 0; j < 3; ++j) d += C[i][j] * (xs[k + 1][j] - b.xp[j]);
      xs[k][i] = a.xf[i] + d;
    }
  }
  return xs;
}

}  // namespace

PositionTrack estimate_position(const std::string& dir, const std::map<std::string, ClockReport>& clocks) {
  PositionTrack out;
  auto geo = TrackGeometry::load(dir + "/line.json");
  Measured m;
  m.gnss = read_gnss(dir, geo);
  // The odometer's local times, its clock from speed cross-correlation against GNSS.
  auto odo = read_first_values(dir + "/odometer.csv", [](double t) { return t; });
  if (odo.size() < 100) throw std::runtime_error(dir + ": too few odometer records");
  out.odometer_clock = odometer_clock(dir, m.gnss, odo);
  // Everything on the reference timebase.
  auto imu_clock = clocks.find("imu");
  if (imu_clock == clocks.end()) throw std::runtime_error(dir + ": no imu_pps.csv");
  ClockMapper imu_map(imu_clock->second.fit);
  m.imu = read_first_values(dir + "/imu.csv", [&](double t) { return imu_map.map(t); });
  ClockMapper odo_map(out.odometer_clock);
  for (auto& o : odo) m.odo_ref.push_back({odo_map.map(o[0]), o[1]});
  m.bal = read_balises(dir, clocks, geo);

  PositionFilter filter(geo, m, out);
  filter.run(m.events());
  auto xs = smooth(filter.steps());
  const auto& steps = filter.steps();
  for (size_t k = 0; k < steps.size(); ++k)
    if (steps[k].odo) {
      out.t.push_back(steps[k].t);
      out.s.push_back(xs[k][0]);
      out.v.push_back(xs[k][1]);
      out.k.push_back(xs[k][2]);
    }
  return out;
}

PositionReport evaluate_position(const std::string& dir, const PositionTrack& track) {
  PositionReport rep;
  Series truth_s;  // chainage as a function of time
  {
    std::ifstream in(dir + "/truth.csv");
    std::string line;
    std::getline(in, line);
    double last_t = -1;
    while (std::getline(in, line)) {
      double s, t;
      if (std::sscanf(line.c_str(), "%lf,%lf", &s, &t) != 2) continue;
      if (t < last_t) continue;
      truth_s.t.push_back(t);
      truth_s.v.push_back(s);
      last_t = t;
    }
  }
  std::ifstream jin(dir + "/truth.json");
  auto truth = nlohmann::json::parse(jin);
  std::vector<std::pair<double, double>> outages;
  for (auto& o : truth["events"]["gnss_outages"])
    if (o[1].get<double>() - o[0].get<double>() >= 30) outages.emplace_back(o[0], o[1]);
  double ss = 0;
  size_t n = 0;
  for (size_t i = 0; i < track.t.size(); ++i) {
    double truth_here = truth_s.at(track.t[i]);
    double signed_e = track.s[i] - truth_here;
    double e = std::abs(signed_e);
    rep.t.push_back(track.t[i]);
    rep.chainage.push_back(truth_here);
    rep.error_m.push_back(signed_e);
    ss += e * e;
    ++n;
    rep.chainage_max_m = std::max(rep.chainage_max_m, e);
    for (auto& [a, b] : outages)
      if (track.t[i] >= a && track.t[i] < b) rep.outage_max_m = std::max(rep.outage_max_m, e);
  }
  rep.chainage_rms_m = n ? std::sqrt(ss / n) : 0;
  auto episodes = truth["events"]["slip_slide"];
  size_t found = 0;
  for (auto& ep : episodes) {
    double a = ep["start_s"], b = ep["end_s"];
    for (auto& [fa, fb] : track.slips)
      if (fa <= b && fb >= a) {
        ++found;
        break;
      }
  }
  rep.slip_recall = episodes.empty() ? 1.0 : double(found) / episodes.size();
  size_t real = 0;
  for (auto& [fa, fb] : track.slips)
    for (auto& ep : episodes)
      if (fa <= ep["end_s"].get<double>() && fb >= ep["start_s"].get<double>()) {
        ++real;
        break;
      }
  rep.slip_precision = track.slips.empty() ? 1.0 : double(real) / track.slips.size();
  auto c = truth["clocks"]["odometer"];
  ClockModel m;
  m.offset_s = c["offset_s"];
  m.drift_ppm = c["drift_ppm"];
  for (auto& s : c["steps"]) m.steps.emplace_back(s["time_s"], s["step_s"]);
  double es = 0;
  size_t en = 0;
  for (double tt = 1; tt < truth["duration_s"].get<double>() - 1; tt += 1) {
    bool near_step = false;
    for (auto& s : m.steps) near_step |= std::abs(tt - s.first) < 1.0;
    if (near_step) continue;
    auto& f = track.odometer_clock;
    double e = f.to_reference(m.local(tt), f.segment_at_reference(tt)) - tt;
    es += e * e;
    ++en;
  }
  rep.odometer_time_error_rms_us = en ? std::sqrt(es / en) * 1e6 : 0;
  return rep;
}

}  // namespace yard::railway
