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

PositionTrack estimate_position(const std::string& dir, const std::map<std::string, ClockReport>& clocks) {
  PositionTrack out;
  auto geo = TrackGeometry::load(dir + "/line.json");

  // GNSS: fixes at their GPS time.
  std::vector<std::array<double, 4>> gnss;  // t, x, y, speed
  {
    auto fixes = read_gnss_fixes(dir, geo.origin);
    for (auto& f : fixes.fixes) gnss.push_back({f.utc, f.x, f.y, f.speed_mps});
    std::sort(gnss.begin(), gnss.end());
    if (gnss.size() < 10) throw std::runtime_error(fixes.source + ": fewer than 10 GNSS fixes");
  }
  Series gspeed;
  for (auto& f : gnss) gspeed.t.push_back(f[0]), gspeed.v.push_back(f[3]);

  // Odometer: local times, its clock from speed cross-correlation against GNSS.
  std::vector<std::array<double, 2>> odo;  // local, speed
  {
    ReadPolicy p;
    p.non_monotonic = OnBad::kDrop;  // keep file order across clock steps; swapped pairs are few
    SensorCsvReader r(dir + "/odometer.csv", p);
    SensorRow row;
    while (r.next(row))
      if (!row.values.empty()) odo.push_back({row.time, row.values[0]});
  }
  if (odo.size() < 100) throw std::runtime_error(dir + ": too few odometer records");
  Series ospeed;
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
  if (pairs.size() >= 10) {
    out.odometer_clock = fit_clock(pairs);
  } else {
    // A short run: too few windows for a drift; one offset (the median lag) is what it supports.
    std::vector<double> lags{*coarse};
    for (auto& [l, r] : pairs) lags.push_back(l - r);
    std::nth_element(lags.begin(), lags.begin() + lags.size() / 2, lags.end());
    out.odometer_clock.segments.push_back({0, t_end, lags[lags.size() / 2]});
  }

  // Everything on the reference timebase.
  std::vector<std::array<double, 2>> imu;  // t, ax
  {
    auto it = clocks.find("imu");
    if (it == clocks.end()) throw std::runtime_error(dir + ": no imu_pps.csv");
    ClockMapper m(it->second.fit);
    ReadPolicy p;
    p.non_monotonic = OnBad::kDrop;
    SensorCsvReader r(dir + "/imu.csv", p);
    SensorRow row;
    while (r.next(row))
      if (!row.values.empty()) imu.push_back({m.map(row.time), row.values[0]});
  }
  std::vector<std::array<double, 2>> odo_ref;  // t, speed
  {
    ClockMapper m(out.odometer_clock);
    for (auto& o : odo) odo_ref.push_back({m.map(o[0]), o[1]});
  }
  std::vector<std::pair<double, double>> bal;  // t, chainage
  {
    auto it = clocks.find("balise");
    if (it != clocks.end()) {
      ClockMapper m(it->second.fit);
      SensorCsvReader r(dir + "/balise.csv");
      SensorRow row;
      while (r.next(row)) {
        auto b = std::find_if(geo.balises.begin(), geo.balises.end(), [&](auto& x) { return x.first == row.text; });
        if (b != geo.balises.end()) bal.emplace_back(m.map(row.time), b->second);
      }
    }
  }
  std::vector<Event> ev;
  for (size_t i = 0; i < imu.size(); ++i) ev.push_back({imu[i][0], 0, i});
  for (size_t i = 0; i < odo_ref.size(); ++i) ev.push_back({odo_ref[i][0], 1, i});
  for (size_t i = 0; i < gnss.size(); ++i) ev.push_back({gnss[i][0], 2, i});
  for (size_t i = 0; i < bal.size(); ++i) ev.push_back({bal[i].first, 3, i});
  std::stable_sort(ev.begin(), ev.end(), [](auto& a, auto& b) { return a.t < b.t; });

  // The filter.
  double lateral;
  double X[3] = {geo.project(gnss[0][1], gnss[0][2], -1, 0, &lateral), gnss[0][3], 1.0};
  double P[3][3] = {{25, 0, 0}, {0, 1, 0}, {0, 0, 1e-3}};
  double t = gnss[0][0], accel = 0;
  const double q_acc = 0.05, q_k = 1e-9;
  auto predict = [&](double to) {
    double dt = to - t;
    if (dt <= 0) return;
    X[0] += X[1] * dt + 0.5 * accel * dt * dt;
    X[1] += accel * dt;
    if (X[1] < 0) X[1] = 0;
    // P = F P F' + Q, F = [[1,dt,0],[0,1,0],[0,0,1]]
    double p00 = P[0][0] + dt * (P[1][0] + P[0][1]) + dt * dt * P[1][1];
    double p01 = P[0][1] + dt * P[1][1], p02 = P[0][2] + dt * P[1][2];
    P[0][0] = p00 + q_acc * dt * dt * dt / 3;
    P[0][1] = P[1][0] = p01 + q_acc * dt * dt / 2;
    P[0][2] = P[2][0] = p02;
    P[1][1] += q_acc * dt;
    P[2][2] += q_k * dt;
    t = to;
  };
  // Scalar update with measurement row H.
  auto update = [&](const double H[3], double y, double R) {
    double PH[3];
    for (int i = 0; i < 3; ++i) PH[i] = P[i][0] * H[0] + P[i][1] * H[1] + P[i][2] * H[2];
    double S = H[0] * PH[0] + H[1] * PH[1] + H[2] * PH[2] + R;
    double K[3] = {PH[0] / S, PH[1] / S, PH[2] / S};
    for (int i = 0; i < 3; ++i) X[i] += K[i] * y;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) P[i][j] -= K[i] * PH[j];
    return S;
  };
  bool slipping = false;
  int calm = 0, suspicious = 0;
  double slip_start = 0, slip_last = 0;
  // For the smoother: at every measurement event, the prior (after prediction) and the posterior.
  struct Step {
    double t;
    double xp[3], Pp[3][3], xf[3], Pf[3][3];
    bool odo;
  };
  std::vector<Step> steps;
  steps.reserve(ev.size() / 8);
  auto begin_step = [&](double when, bool odo) {
    Step st;
    st.t = when;
    st.odo = odo;
    std::copy(X, X + 3, st.xp);
    std::copy(&P[0][0], &P[0][0] + 9, &st.Pp[0][0]);
    steps.push_back(st);
  };
  auto end_step = [&] {
    std::copy(X, X + 3, steps.back().xf);
    std::copy(&P[0][0], &P[0][0] + 9, &steps.back().Pf[0][0]);
  };
  // One measurement event: an update, or none (a rejected fix returns early).
  auto measure = [&](const Event& e) {
    if (e.kind == 0) {
      accel = imu[e.i][1] - kG * geo.gradient(X[0]) / 1000.0;
    } else if (e.kind == 1) {
      double z = odo_ref[e.i][1];
      double y = z - X[2] * X[1];
      double gate = std::max(0.15, 0.025 * X[1]);
      bool bad = std::abs(y) > gate;
      if (bad) {
        ++suspicious;
        calm = 0;
      } else {
        suspicious = 0;
        ++calm;
      }
      if (!slipping && suspicious >= 2) {
        slipping = true;
        slip_start = e.t - 0.05;
      }
      if (slipping && (calm >= 3 || e.t - slip_start > 8)) {
        slipping = false;
        out.slips.emplace_back(slip_start, slip_last);
        suspicious = 0;
      }
      if (bad) slip_last = e.t;
      if (!slipping && !bad) {
        double H[3] = {0, X[2], X[1]};
        update(H, y, 0.03 * 0.03);
      }
    } else if (e.kind == 2) {
      auto& f = gnss[e.i];
      double s = geo.project(f[1], f[2], X[0], 300, &lateral);
      double y = s - X[0];
      double R = 1.5 * 1.5;
      if (lateral > 6 || std::abs(y) > 4 * std::sqrt(P[0][0] + R) + 2) {
        ++out.gnss_rejected;
        return;
      }
      double Hs[3] = {1, 0, 0};
      update(Hs, y, R);
      double Hv[3] = {0, 1, 0};
      update(Hv, f[3] - X[1], 0.1 * 0.1);
      ++out.gnss_used;
    } else {
      double y = bal[e.i].second - X[0];
      if (std::abs(y) > 50) return;
      double H[3] = {1, 0, 0};
      update(H, y, 0.6 * 0.6);
      ++out.balises_used;
    }
  };
  for (auto& e : ev) {
    if (e.t < t) continue;
    predict(e.t);
    if (e.kind != 0) begin_step(e.t, e.kind == 1);
    measure(e);
    if (e.kind != 0) end_step();
  }
  if (slipping) out.slips.emplace_back(slip_start, slip_last);

  // Rauch-Tung-Striebel smoothing backwards over the stored steps: the aligner works offline, so
  // every estimate can use the measurements after it too (what bridges tunnels best).
  auto inv3 = [](const double m[3][3], double r[3][3]) {
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
  };
  std::vector<std::array<double, 3>> xs(steps.size());
  if (!steps.empty()) {
    std::copy(steps.back().xf, steps.back().xf + 3, xs.back().begin());
    for (size_t k = steps.size() - 1; k-- > 0;) {
      const Step& a = steps[k];
      const Step& b = steps[k + 1];
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
  }
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
