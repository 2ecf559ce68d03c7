// The train run and the sensors. See sim.h for what is written.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rng.h"
#include "yard/railway/nmea.h"
#include "yard/railway/sim.h"

namespace yard::railway {

namespace {

constexpr double kG = 9.81;

// s(t), v(t), a(t) of the train: knots every metre, plus a held knot for each station dwell.
struct Trajectory {
  std::vector<double> T, S, V;
  double end_time() const { return T.back(); }
  struct State {
    double s, v, a;
  };
  // Sequential lookups: `k` is the caller's cursor (times must not go backwards for one cursor).
  State at(double t, size_t& k) const {
    while (k + 1 < T.size() && T[k + 1] <= t) ++k;
    if (k + 1 >= T.size()) return {S.back(), 0, 0};
    if (S[k + 1] == S[k]) return {S[k], 0, 0};
    double f = (t - T[k]) / (T[k + 1] - T[k]);
    double v = V[k] + (V[k + 1] - V[k]) * f;
    double a = (V[k + 1] * V[k + 1] - V[k] * V[k]) / (2 * (S[k + 1] - S[k]));
    return {S[k] + (S[k + 1] - S[k]) * f, v, a};
  }
  // The time the train passes chainage s (the first time).
  double time_at(double s) const {
    auto it = std::lower_bound(S.begin(), S.end(), s);
    if (it == S.end()) return T.back();
    size_t i = static_cast<size_t>(it - S.begin());
    if (i == 0) return T[0];
    double f = (s - S[i - 1]) / std::max(1e-9, S[i] - S[i - 1]);
    return T[i - 1] + (T[i] - T[i - 1]) * f;
  }
};

Trajectory run_train(const Line& L, Rng& rng) {
  const double ds = 1.0, acc = 0.5, brake = 0.7;
  size_t n = static_cast<size_t>(L.length / ds) + 1;
  double style = rng.uniform(0.93, 0.99);  // the driver runs a little under the limits
  std::vector<double> lim(n), vf(n), vb(n);
  for (size_t i = 0; i < n; ++i) lim[i] = L.limit(i * ds) * style;
  std::vector<bool> stop(n, false);
  for (auto& st : L.stations) stop[std::min(n - 1, static_cast<size_t>(st.chainage / ds))] = true;
  vf[0] = 0;
  for (size_t i = 1; i < n; ++i) vf[i] = stop[i] ? 0 : std::min(lim[i], std::sqrt(vf[i - 1] * vf[i - 1] + 2 * acc * ds));
  vb[n - 1] = 0;
  for (size_t i = n - 1; i-- > 0;) vb[i] = stop[i] ? 0 : std::min(lim[i], std::sqrt(vb[i + 1] * vb[i + 1] + 2 * brake * ds));
  Trajectory tr;
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    double v = std::min(vf[i], vb[i]);
    if (i > 0) {
      double avg = std::max(0.05, 0.5 * (v + tr.V.back()));
      t += ds / avg;
    }
    tr.T.push_back(t);
    tr.S.push_back(i * ds);
    tr.V.push_back(v);
    if (stop[i] && i > 0 && i + 1 < n) {
      for (auto& st : L.stations)
        if (static_cast<size_t>(st.chainage / ds) == i) t += st.dwell_s;
      tr.T.push_back(t);
      tr.S.push_back(i * ds);
      tr.V.push_back(0);
    }
  }
  return tr;
}

// Second derivative of the irregularity along chainage (1/m · mm), for the axle-box response.
std::vector<float> curvature_of(const std::vector<float>& z, double step) {
  std::vector<float> d(z.size(), 0.f);
  for (size_t i = 1; i + 1 < z.size(); ++i) d[i] = static_cast<float>((z[i + 1] - 2 * z[i] + z[i - 1]) / (step * step));
  return d;
}

// One sensor's output file: rows are buffered, a few written swapped (out of order), gaps left
// where the logger dropped out.
class Writer {
 public:
  Writer(const std::string& path, const std::string& header, const SensorConfig& cfg, Rng& rng, double duration)
      : f_(std::fopen(path.c_str(), "w")), cfg_(cfg), rng_(rng) {
    if (!f_) throw std::runtime_error("cannot write " + path);
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
    std::fprintf(f_, "%s\n", header.c_str());
    int drops = static_cast<int>(std::round(cfg.dropout_per_hour * duration / 3600));
    for (int i = 0; i < drops; ++i) {
      double s = rng_.uniform(0, duration);
      gaps_.push_back({s, s + rng_.uniform(1, 20)});
    }
  }
  ~Writer() { close(); }
  bool dropped(double t) const {
    for (auto& [a, b] : gaps_)
      if (t >= a && t < b) return true;
    return false;
  }
  void row(std::string line) {
    ++count_;
    if (!held_.empty()) {
      std::fputs(line.c_str(), f_);  // written before the held one: out of order
      std::fputs(held_.c_str(), f_);
      held_.clear();
      return;
    }
    if (rng_.chance(cfg_.out_of_order)) {
      held_ = std::move(line);
      return;
    }
    std::fputs(line.c_str(), f_);
  }
  void close() {
    if (!f_) return;
    if (!held_.empty()) std::fputs(held_.c_str(), f_);
    std::fclose(f_);
    f_ = nullptr;
  }
  uint64_t count() const { return count_; }
  const std::vector<std::pair<double, double>>& gaps() const { return gaps_; }

 private:
  FILE* f_;
  const SensorConfig& cfg_;
  Rng& rng_;
  std::string held_;
  std::vector<std::pair<double, double>> gaps_;
  uint64_t count_ = 0;
};

double local_time(const ClockModel& c, double t, Rng& rng) { return c.local(t) + c.jitter_s * rng.normal(); }

nlohmann::json clock_json(const ClockModel& c) {
  nlohmann::json steps = nlohmann::json::array();
  for (auto& [t, d] : c.steps) steps.push_back({{"time_s", t}, {"step_s", d}});
  return {{"offset_s", c.offset_s}, {"drift_ppm", c.drift_ppm}, {"jitter_s", c.jitter_s}, {"steps", steps}};
}

// Where the line's local x (east) and y (north) metres start (WGS84 degrees), and the day the run
// starts: at 00:00:00 UTC, so that reference time (UTC seconds since the first day's midnight) is
// the simulation's time.
constexpr PlaneOrigin kOrigin{47.3769, 8.5417};
constexpr UtcDate kStartDate{2026, 3, 14};

// A sentence as a logger captured it: now and then a byte flipped on the wire (the checksum
// catches it) or the line cut short.
std::string captured(const std::string& body, Rng& rng, nlohmann::json& corrupted) {
  std::string s = nmea_sentence(body);
  if (rng.chance(0.002)) {
    size_t at = 1 + static_cast<size_t>(rng.uniform() * (s.size() - 4));
    s[at] = s[at] == '7' ? '1' : '7';
    corrupted["bad_checksum"] = corrupted.value("bad_checksum", 0) + 1;
  } else if (rng.chance(0.001)) {
    s.resize(static_cast<size_t>(rng.uniform(0.3, 0.9) * s.size()));
    corrupted["malformed"] = corrupted.value("malformed", 0) + 1;
  }
  return s;
}

// The GNSS receiver and the PPS line. Every logger with a PPS input records the edges on its own
// clock, unlabelled (5% missed, 1% spurious), and the receiver's serial stream beside them: the
// GNSS logger all of it (RMC, GGA, ZDA in gnss.nmea), the others its ZDA sentences
// (<name>_time.nmea). A second's burst leaves the receiver 10-700 ms after its edge and reaches
// each logger after that logger's serial delay. In tunnels the receiver has no fix and says so,
// while its clock keeps the PPS and the time going.
// A second's GNSS fix, shared by every logger's copy of the stream: (lat, lon) or none, speed,
// course, satellites.
struct Fix {
  std::optional<std::pair<double, double>> ll;
  double speed = 0, course = 0;
  int sats = 0;
};

// How long after its PPS edge each second's burst of sentences leaves the receiver.
std::vector<double> burst_delays(const SimConfig& cfg, double duration) {
  std::vector<double> burst;
  Rng rng(cfg.seed, "gnss.burst");
  for (double t = 0; t < duration; t += 1) burst.push_back(rng.uniform(0.01, 0.7));
  return burst;
}

// The receiver's fix every second: none in tunnels (the outages go into `events`), noisy, and in
// cuttings with fewer satellites and now and then a multipath jump.
std::vector<Fix> gnss_fixes(const SimConfig& cfg, const Line& L, const Trajectory& tr, double duration,
                            nlohmann::json& events) {
  std::vector<Fix> fixes;
  Rng rng(cfg.seed, "gnss");
  size_t k = 0;
  nlohmann::json outages = nlohmann::json::array();
  double outage_start = -1;
  for (double t = 0; t < duration; t += 1) {
    auto st = tr.at(t, k);
    Fix f;
    bool tunnel = L.in(L.tunnels, st.s);
    if (tunnel && outage_start < 0) outage_start = t;
    if (!tunnel && outage_start >= 0) {
      outages.push_back({outage_start, t});
      outage_start = -1;
    }
    if (!tunnel) {
      auto [x, y] = L.position(st.s);
      auto [x2, y2] = L.position(std::min(L.length, st.s + 1.0));
      double sigma = 1.5;
      x += sigma * rng.normal();
      y += sigma * rng.normal();
      f.sats = 12;
      if (L.in(L.cuttings, st.s)) {
        f.sats = 6;
        if (rng.chance(0.25)) {
          double d = rng.uniform(5, 50), ang = rng.uniform(0, 2 * M_PI);
          x += d * std::cos(ang);
          y += d * std::sin(ang);
        }
      }
      f.ll = plane_to_wgs84(kOrigin, x, y);
      f.speed = std::max(0.0, st.v + 0.05 * rng.normal());
      f.course = std::fmod(std::atan2(x2 - x, y2 - y) * 180 / M_PI + 360, 360);
    }
    fixes.push_back(f);
  }
  events["gnss_outages"] = outages;
  return fixes;
}

// What each logger records of the receiver's time on its own clock: the PPS edges, unlabelled,
// and the receiver's serial stream beside them, which reaches it after its serial delay.
struct TimeSync {
  const SimConfig& cfg;
  double duration;
  const std::string& dir;
  std::vector<double> burst;
  std::vector<Fix> fixes;
  nlohmann::json pps_events = nlohmann::json::object(), corrupted = nlohmann::json::object();

  // Logger `name`'s PPS edges (5% missed, 1% spurious) into <name>_pps.csv; then its sentences.
  void record(const char* name, const SensorConfig& sc, SimSummary& sum) {
    Rng rng(cfg.seed, std::string("pps.") + name);
    Writer w(dir + "/" + name + "_pps.csv", "local_time", sc, rng, duration);
    uint64_t missed = 0, spurious = 0;
    for (double t = 1; t < duration; t += 1) {
      if (w.dropped(t)) continue;
      if (rng.chance(0.05)) {
        ++missed;
      } else {
        w.row(fmt::format("{:.7f}\n", local_time(sc.clock, t, rng)));
      }
      if (rng.chance(0.01)) {  // noise on the line, seen as an edge
        ++spurious;
        w.row(fmt::format("{:.7f}\n", local_time(sc.clock, t + rng.uniform(0.05, 0.95), rng)));
      }
    }
    pps_events[name] = {{"missed", missed}, {"spurious", spurious}};
    record_sentences(name, sc, w, sum);
  }

  // The GNSS logger's whole stream (RMC, GGA, ZDA: gnss.nmea), another logger's ZDA sentences
  // (<name>_time.nmea), each at its arrival on the logger's clock after its serial delay.
  void record_sentences(const char* name, const SensorConfig& sc, Writer& w, SimSummary& sum) {
    bool gnss = std::string(name) == "gnss";
    std::string path = dir + "/" + name + (gnss ? ".nmea" : "_time.nmea");
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write " + path);
    Rng srng(cfg.seed, std::string("nmea.") + name);
    double serial = srng.uniform(0.0005, 0.003);
    nlohmann::json bad = nlohmann::json::object();
    uint64_t sentences = 0;
    auto emit = [&](double arrival, const std::string& body) {
      out << fmt::format("{:.6f} ", local_time(sc.clock, arrival, srng)) << captured(body, srng, bad) << "\n";
      ++sentences;
    };
    for (size_t i = 0; i < burst.size(); ++i) {
      double t = static_cast<double>(i), at = t + burst[i] + serial;
      if (w.dropped(at)) continue;
      const Fix& f = fixes[i];
      if (gnss) {  // in a u-blox receiver's order: RMC first
        emit(at, nmea_rmc(kStartDate, t, f.ll, f.speed, f.course));
        emit(at + 0.02, nmea_gga(kStartDate, t, f.ll, f.sats, f.sats >= 10 ? 0.8 : 2.1));
      }
      emit(at + (gnss ? 0.035 : 0), nmea_zda(kStartDate, t));
    }
    corrupted[name] = bad;
    sum.records[gnss ? "gnss" : std::string(name) + "_time"] = sentences;
  }
};

// The GNSS receiver and the PPS line, as every logger with a PPS input records them (TimeSync). A
// second's burst leaves the receiver 10-700 ms after its edge; in tunnels the receiver has no fix
// and says so, while its clock keeps the PPS and the time going.
template <class SensorOf>
void record_time_sync(const SimConfig& cfg, const Line& L, const Trajectory& tr, SensorOf&& sensor, double duration,
                      const std::string& dir, nlohmann::json& events, SimSummary& sum) {
  TimeSync ts{cfg, duration, dir, burst_delays(cfg, duration), gnss_fixes(cfg, L, tr, duration, events)};
  for (const char* name : {"gnss", "imu", "axlebox", "balise"}) ts.record(name, sensor(name), sum);
  events["pps"] = ts.pps_events;
  events["nmea_corrupted"] = ts.corrupted;
}
}  // namespace

double ClockModel::local(double t) const {
  double v = offset_s + (1 + drift_ppm * 1e-6) * t;
  for (auto& [when, step] : steps)
    if (t >= when) v += step;
  return v;
}

SimConfig default_config(uint64_t seed) {
  SimConfig c;
  c.seed = seed;
  Rng rng(seed, "clocks");
  struct Spec {
    const char* name;
    double rate, jitter, max_offset;
    int steps;
  };
  for (auto sp : {Spec{"gnss", 1, 50e-6, 2, 0}, Spec{"odometer", 20, 200e-6, 3, 1}, Spec{"imu", 200, 20e-6, 3, 1},
                  Spec{"axlebox", 2500, 5e-6, 3, 1}, Spec{"balise", 0, 1e-3, 3, 0}}) {
    SensorConfig s;
    s.rate_hz = sp.rate;
    s.clock.offset_s = rng.uniform(-sp.max_offset, sp.max_offset);
    s.clock.drift_ppm = rng.uniform(-20, 20);
    s.clock.jitter_s = sp.jitter;
    for (int i = 0; i < sp.steps; ++i)
      s.clock.steps.emplace_back(rng.uniform(300, 3300), rng.uniform(0.01, 0.5) * (rng.chance(0.5) ? 1 : -1));
    c.sensors[sp.name] = s;
  }
  return c;
}

namespace {

// What every sensor's recording shares: the run's settings, line, trajectory, length and directory.
struct Run {
  const SimConfig& cfg;
  const Line& L;
  const Trajectory& tr;
  double duration;
  const std::string& dir;
};

// Odometer: speed with a wheel-diameter scale error, slip while accelerating and slide while
// braking, and the distance it integrates.
void record_odometer(const Run& r, const SensorConfig& sc, nlohmann::json& events, SimSummary& sum) {
  Rng rng(r.cfg.seed, "odometer");
  Writer w(r.dir + "/odometer.csv", "local_time,speed_mps,distance_m", sc, rng, r.duration);
  double scale = 1 + rng.uniform(-0.02, 0.02);
  size_t k = 0;
  double dist = 0, dt = 1.0 / sc.rate_hz;
  double episode_end = -1, episode_gain = 0;
  nlohmann::json episodes = nlohmann::json::array();
  for (double t = 0; t < r.duration; t += dt) {
    auto st = r.tr.at(t, k);
    if (t >= episode_end && st.v > 3 && std::abs(st.a) > 0.2 && rng.chance(dt / 120.0)) {
      double len = rng.uniform(0.5, 5);
      episode_gain = (st.a > 0 ? 1 : -1) * rng.uniform(0.05, 0.2);
      episode_end = t + len;
      episodes.push_back({{"start_s", t}, {"end_s", t + len}, {"kind", st.a > 0 ? "slip" : "slide"}, {"gain", episode_gain}});
    }
    double gain = t < episode_end ? episode_gain : 0;
    double v = std::max(0.0, st.v * scale * (1 + gain) + 0.02 * rng.normal());
    dist += v * dt;
    if (w.dropped(t)) continue;
    w.row(fmt::format("{:.6f},{:.4f},{:.3f}\n", local_time(sc.clock, t, rng), v, dist));
  }
  events["odometer_scale"] = scale;
  events["slip_slide"] = episodes;
  sum.records["odometer"] = w.count();
}

// IMU: longitudinal acceleration with the gradient, lateral v^2/R minus the cant term, yaw rate
// v/R; biases and noise.
void record_imu(const Run& r, const SensorConfig& sc, SimSummary& sum) {
  Rng rng(r.cfg.seed, "imu");
  Writer w(r.dir + "/imu.csv", "local_time,ax,ay,az,gx,gy,gz", sc, rng, r.duration);
  double bx = rng.uniform(-0.05, 0.05), by = rng.uniform(-0.05, 0.05), bz = rng.uniform(-0.05, 0.05);
  size_t k = 0;
  for (double t = 0, dt = 1.0 / sc.rate_hz; t < r.duration; t += dt) {
    if (w.dropped(t)) continue;
    auto st = r.tr.at(t, k);
    double kappa = r.L.curvature(st.s);
    double ax = st.a + kG * r.L.gradient(st.s) / 1000 + bx + 0.02 * rng.normal();
    double ay = st.v * st.v * kappa - kG * r.L.cant(st.s) / 1500 + by + 0.02 * rng.normal();
    double az = kG + bz + 0.05 * rng.normal();
    w.row(fmt::format("{:.6f},{:.4f},{:.4f},{:.4f},{:.5f},{:.5f},{:.5f}\n", local_time(sc.clock, t, rng), ax, ay, az,
                      0.001 * rng.normal(), 0.001 * rng.normal(), st.v * kappa + 0.001 * rng.normal()));
  }
  sum.records["imu"] = w.count();
}

// A defect's impulse at the axle box: ringing at its resonances from t0.
struct Mode { double f, amp, zeta; };
struct Hit { double t0, severity; std::vector<Mode> modes; };

// The wheel's hits on the localised defects the run passes, by time (an insulated joint: two).
std::vector<Hit> defect_hits(const Run& r) {
  std::vector<Hit> hits;
  for (auto& d : r.L.defects) {
    if (d.kind == DefectClass::kCorrugation) continue;
    double t0 = r.tr.time_at(d.chainage);
    if (t0 >= r.duration) continue;
    Hit h{t0, d.severity, {}};
    switch (d.kind) {
      case DefectClass::kSquat: h.modes = {{300, 8, 0.08}, {1100, 5, 0.05}}; break;
      case DefectClass::kWeld: h.modes = {{150, 3, 0.1}, {600, 1.5, 0.08}}; break;
      case DefectClass::kInsulatedJoint: h.modes = {{320, 7, 0.08}, {1050, 4, 0.05}}; break;  // a squat look-alike
      default: break;
    }
    hits.push_back(h);
    if (d.kind == DefectClass::kInsulatedJoint) hits.push_back({t0 + 0.004, d.severity * 0.6, h.modes});
  }
  std::sort(hits.begin(), hits.end(), [](auto& a, auto& b) { return a.t0 < b.t0; });
  return hits;
}

// Axle-box vertical acceleration: the irregularity seen at speed (v^2 z''), the sleeper-passing
// tone, defect impulses ringing at their resonances, corrugation, noise.
void record_axlebox(const Run& r, const SensorConfig& sc, SimSummary& sum) {
  Rng rng(r.cfg.seed, "axlebox");
  Writer w(r.dir + "/axlebox.csv", "local_time,acc_z", sc, rng, r.duration);
  auto z2 = curvature_of(r.L.irregularity, r.L.step);
  auto hits = defect_hits(r);
  size_t k = 0, next_hit = 0;
  std::deque<Hit> active;
  double nyquist = sc.rate_hz / 2;
  for (double t = 0, dt = 1.0 / sc.rate_hz; t < r.duration; t += dt) {
    auto st = r.tr.at(t, k);
    // z'' between its grid points (a staircase would ring at v / step, a tone no track makes).
    double fi = std::clamp(st.s / r.L.step, 0.0, double(z2.size() - 2));
    size_t i = static_cast<size_t>(fi);
    double z2_at = z2[i] + (z2[i + 1] - z2[i]) * (fi - double(i));
    double vs = st.v / 44.4;
    double acc = st.v * st.v * z2_at / 1000.0;
    acc += 0.5 * vs * vs * std::sin(2 * M_PI * st.s / 0.6);
    while (next_hit < hits.size() && hits[next_hit].t0 <= t) active.push_back(hits[next_hit++]);
    while (!active.empty() && t - active.front().t0 > 0.05) active.pop_front();
    for (auto& h : active) {
      double tau = t - h.t0;
      for (auto& m : h.modes) {
        if (m.f > 0.9 * nyquist) continue;
        double wn = 2 * M_PI * m.f;
        acc += h.severity * m.amp * (0.2 + vs * vs) * std::exp(-m.zeta * wn * tau) * std::sin(wn * tau);
      }
    }
    if (r.L.label(st.s) == DefectClass::kCorrugation && st.v > 1) {
      double f = st.v / 0.05;
      if (f < 0.9 * nyquist) acc += 2.0 * vs * vs * std::sin(2 * M_PI * st.s / 0.05);
    }
    acc += 0.3 * rng.normal();
    if (w.dropped(t)) continue;
    w.row(fmt::format("{:.7f},{:.3f}\n", local_time(sc.clock, t, rng), acc));
  }
  sum.records["axlebox"] = w.count();
}

// Balise detections: a position error of about a metre, rarely missed.
void record_balises(const Run& r, const SensorConfig& sc, SimSummary& sum) {
  Rng rng(r.cfg.seed, "balise");
  Writer w(r.dir + "/balise.csv", "local_time,balise_id", sc, rng, r.duration);
  for (auto& b : r.L.balises) {
    if (rng.chance(0.01)) continue;
    double t = r.tr.time_at(b.chainage + 0.5 * rng.normal());
    if (t >= r.duration || w.dropped(t)) continue;
    w.row(fmt::format("{:.6f},{}\n", local_time(sc.clock, t, rng), b.id));
  }
  sum.records["balise"] = w.count();
}

// Ground truth every step (0.25 m) over the distance run: time, speed, label, irregularity and
// its D1-band amplitude (RMS over 25 m).
void write_truth_csv(const Run& r, double distance_m) {
  const Line& L = r.L;
  FILE* f = std::fopen((r.dir + "/truth.csv").c_str(), "w");
  if (!f) throw std::runtime_error("cannot write truth.csv");
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  std::fprintf(f, "chainage_m,time_s,speed_mps,label,irregularity_mm,amplitude_mm\n");
  size_t n = static_cast<size_t>(distance_m / L.step);
  size_t half = static_cast<size_t>(12.5 / L.step);
  std::vector<double> sq(L.irregularity.size() + 1, 0);
  for (size_t i = 0; i < L.irregularity.size(); ++i) sq[i + 1] = sq[i] + double(L.irregularity[i]) * L.irregularity[i];
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = i * L.step;
    double t = r.tr.time_at(s);
    while (k + 1 < r.tr.T.size() && r.tr.T[k + 1] <= t) ++k;
    size_t lo = i > half ? i - half : 0, hi = std::min(L.irregularity.size(), i + half);
    double amp = std::sqrt((sq[hi] - sq[lo]) / std::max<size_t>(1, hi - lo));
    std::fprintf(f, "%.2f,%.6f,%.3f,%d,%.3f,%.3f\n", s, t, r.tr.V[std::min(k, r.tr.V.size() - 1)],
                 static_cast<int>(L.label(s, s + L.step)), L.irregularity[i], amp);
  }
  std::fclose(f);
}

nlohmann::json zones_json(const std::vector<Zone>& z) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& x : z) a.push_back({{"start", x.start}, {"end", x.end}});
  return a;
}

// The line as the aligner may know it (no defects): line.json.
nlohmann::json line_json(const Line& L) {
  nlohmann::json j;
  j["length_m"] = L.length;
  j["curves"] = nlohmann::json::array();
  for (auto& c : L.curves) j["curves"].push_back({{"start", c.start}, {"end", c.end}, {"radius", c.radius}, {"cant_mm", c.cant}});
  j["gradients"] = nlohmann::json::array();
  for (auto& [s, g] : L.gradients) j["gradients"].push_back({{"start", s}, {"permille", g}});
  j["speed_limits"] = nlohmann::json::array();
  for (auto& l : L.limits) j["speed_limits"].push_back({{"start", l.start}, {"end", l.end}, {"v_max_mps", l.v_max}});
  j["tunnels"] = zones_json(L.tunnels);
  j["cuttings"] = zones_json(L.cuttings);
  j["stations"] = nlohmann::json::array();
  for (auto& s : L.stations) j["stations"].push_back({{"name", s.name}, {"chainage", s.chainage}});
  j["balises"] = nlohmann::json::array();
  for (auto& b : L.balises) j["balises"].push_back({{"id", b.id}, {"chainage", b.chainage}});
  j["km_posts"] = L.km_posts;
  // Where the line's local x (east) and y (north) metres start, for maps (WGS84 degrees).
  j["origin"] = {{"lat", kOrigin.lat}, {"lon", kOrigin.lon}};
  nlohmann::json poly = nlohmann::json::array();
  size_t every = static_cast<size_t>(10 / L.step);
  for (size_t i = 0; i < L.x.size(); i += every) poly.push_back({i * L.step, L.x[i], L.y[i]});
  j["polyline"] = poly;  // [chainage, x, y] every 10 m
  return j;
}

// The truth the aligner may not know: truth.json.
nlohmann::json truth_json(const Run& r, const std::map<std::string, SensorConfig>& sensors, double distance_m,
                          const nlohmann::json& events) {
  nlohmann::json t;
  t["seed"] = r.cfg.seed;
  t["simulator_version"] = kSimulatorVersion;
  t["duration_s"] = r.duration;
  t["utc_start"] = fmt::format("{:04d}-{:02d}-{:02d}T00:00:00Z", kStartDate.year, kStartDate.month, kStartDate.day);
  t["distance_m"] = distance_m;
  t["clocks"] = nlohmann::json::object();
  for (auto& [name, sc] : sensors) t["clocks"][name] = clock_json(sc.clock);
  t["defects"] = nlohmann::json::array();
  for (auto& d : r.L.defects)
    t["defects"].push_back({{"kind", defect_name(d.kind)}, {"chainage", d.chainage}, {"length", d.length}, {"severity", d.severity}});
  t["degraded"] = zones_json(r.L.degraded);
  t["events"] = events;
  return t;
}

}  // namespace

SimSummary simulate(const SimConfig& cfg, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  Line L = make_line(cfg.seed, cfg.length_m);
  Rng traj_rng(cfg.seed, "train");
  Trajectory tr = run_train(L, traj_rng);
  double duration = std::min(tr.end_time(), cfg.max_duration_s);
  SimSummary sum;
  sum.duration_s = duration;
  {
    size_t k = 0;
    sum.distance_m = tr.at(duration, k).s;
  }
  std::map<std::string, SensorConfig> sensors = cfg.sensors;
  if (!cfg.bad_logger.empty()) {
    auto it = sensors.find(cfg.bad_logger);
    if (it == sensors.end()) throw std::runtime_error("no sensor named " + cfg.bad_logger);
    it->second.clock.drift_ppm = 1600;
  }
  auto sensor = [&](const char* name) -> const SensorConfig& {
    auto it = sensors.find(name);
    if (it == sensors.end()) throw std::runtime_error(std::string("no configuration for sensor ") + name);
    return it->second;
  };
  nlohmann::json events;
  Run run{cfg, L, tr, duration, dir};
  record_time_sync(cfg, L, tr, sensor, duration, dir, events, sum);
  record_odometer(run, sensor("odometer"), events, sum);
  record_imu(run, sensor("imu"), sum);
  record_axlebox(run, sensor("axlebox"), sum);
  record_balises(run, sensor("balise"), sum);
  write_truth_csv(run, sum.distance_m);
  std::ofstream(dir + "/line.json") << line_json(L).dump(1) << "\n";
  std::ofstream(dir + "/truth.json") << truth_json(run, sensors, sum.distance_m, events).dump(1) << "\n";
  return sum;
}

}  // namespace yard::railway
