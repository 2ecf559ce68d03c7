// The clock fit recovers planted offsets, drifts and steps for every clock model the simulator
// has, from (local, reference) PPS pairs, and maps timestamps to reference time within 100 µs.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "yard/railway/align.h"
#include "yard/railway/clock_fit.h"
#include "yard/railway/readers.h"
#include "yard/railway/sim.h"

using namespace yard::railway;
namespace fs = std::filesystem;

namespace {

struct Model {
  const char* name;
  double offset, drift_ppm, jitter;
  std::vector<std::pair<double, double>> steps;
  double outlier_rate;
};

std::vector<std::pair<double, double>> pairs_for(const Model& m, uint32_t seed, double duration = 3600) {
  ClockModel c;
  c.offset_s = m.offset;
  c.drift_ppm = m.drift_ppm;
  c.steps = m.steps;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, m.jitter);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::pair<double, double>> p;
  for (double t = 1; t < duration; t += 1) {
    double l = c.local(t) + noise(rng);
    if (u(rng) < m.outlier_rate) l += u(rng) < 0.5 ? 1 : -1;
    p.emplace_back(l, t);
  }
  return p;
}

// RMS of (mapped reference - true time) over the run, through the fitted segments.
double time_error_rms(const ClockFit& f, const Model& m, double duration = 3600) {
  ClockModel c;
  c.offset_s = m.offset;
  c.drift_ppm = m.drift_ppm;
  c.steps = m.steps;
  double ss = 0;
  int n = 0;
  for (double t = 0.5; t < duration; t += 0.5) {
    // Skip the second around a step: which side a timestamp in it belongs to is not decidable
    // from PPS alone.
    bool near_step = false;
    for (auto& s : m.steps) near_step |= std::abs(t - s.first) < 1.0;
    if (near_step) continue;
    double ref = f.to_reference(c.local(t), f.segment_at_reference(t));
    ss += (ref - t) * (ref - t);
    ++n;
  }
  return std::sqrt(ss / n);
}

}  // namespace

TEST_CASE("the clock fit recovers every clock model", "[railway][clock]") {
  std::vector<Model> models = {
      {"tcxo", 0.2, 1.5, 5e-6, {}, 0},
      {"crystal +20 ppm", -2.7, 20, 20e-6, {}, 0},
      {"crystal -20 ppm", 1.3, -20, 20e-6, {}, 0},
      {"bad logger 1600 ppm", 3.0, 1600, 50e-6, {}, 0},
      {"NTP steps", 0.9, -7, 20e-6, {{900, 0.25}, {2500, -0.04}}, 0},
      {"small step", 0.1, 4, 5e-6, {{1800, 0.01}}, 0},
      {"outliers", -1.1, 12, 20e-6, {}, 0.003},
      {"everything", 2.2, -15, 1e-3, {{700, -0.3}, {2100, 0.12}}, 0.002},
  };
  uint32_t seed = 1;
  for (auto& m : models) {
    INFO(m.name);
    auto fit = fit_clock(pairs_for(m, seed++));
    CHECK(fit.segments.size() == m.steps.size() + 1);
    CHECK(std::abs(fit.drift_ppm - m.drift_ppm) < 0.05 + m.jitter * 1e6 / 100);
    CHECK(std::abs(fit.segments[0].offset_s - m.offset) < 1e-4 + m.jitter / 10);
    double err = time_error_rms(fit, m);
    CHECK(err < 100e-6);
    if (m.outlier_rate > 0) CHECK(fit.outliers > 0);
  }
}

TEST_CASE("the mapper follows a stream across forward and backward steps", "[railway][clock]") {
  Model m{"steps", 0.5, 10, 5e-6, {{1000, -0.3}, {2000, 0.2}}, 0};
  auto fit = fit_clock(pairs_for(m, 7, 3000));
  ClockModel c;
  c.offset_s = m.offset;
  c.drift_ppm = m.drift_ppm;
  c.steps = m.steps;
  ClockMapper mapper(fit);
  double worst = 0;
  for (double t = 0; t < 3000; t += 0.01) {  // 100 Hz records in file order
    double ref = mapper.map(c.local(t));
    worst = std::max(worst, std::abs(ref - t));
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("too few pairs is a clear error", "[railway][clock]") {
  std::vector<std::pair<double, double>> p = {{1, 1}, {2, 2}};
  CHECK_THROWS_WITH(fit_clock(p), Catch::Contains("fewer than 10"));
}

TEST_CASE("simulated loggers: fitted clocks match the planted ones within 100 µs", "[railway][clock][sim]") {
  auto dir = (fs::temp_directory_path() / ("yard-clock-sim-" + std::to_string(getpid()))).string();
  auto cfg = default_config(21);
  cfg.length_m = 12000;
  cfg.max_duration_s = 1500;
  cfg.bad_logger = "axlebox";
  simulate(cfg, dir);
  std::ifstream tin(dir + "/truth.json");
  auto truth = nlohmann::json::parse(tin);
  auto reports = align_clocks(dir, {}, false);  // unlabelled edges, paired with the time messages
  for (std::string name : {"gnss", "imu", "axlebox", "balise"}) {
    INFO(name);
    REQUIRE(reports.count(name));
    const auto& fit = reports.at(name).fit;
    REQUIRE(reports.at(name).pairing);
    const auto& pairing = *reports.at(name).pairing;
    // The spurious edges, and only those, are off the one-second grid (an accidental one on it
    // at most); an edge is unlabelled only when its message was lost to corruption.
    long spurious = truth["events"]["pps"][name]["spurious"];
    CHECK(std::abs(static_cast<long>(pairing.off_grid) - spurious) <= 1);
    auto bad = truth["events"]["nmea_corrupted"][name];
    CHECK(pairing.unlabelled <= bad.value("bad_checksum", 0u) + bad.value("malformed", 0u) + 2);
    CHECK(fit.pairs_used > 0.85 * truth["duration_s"].get<double>());
    auto c = truth["clocks"][name];
    Model m{name.c_str(), c["offset_s"], c["drift_ppm"], c["jitter_s"], {}, 0};
    for (auto& s : c["steps"])
      if (s["time_s"].get<double>() < truth["duration_s"].get<double>()) m.steps.emplace_back(s["time_s"], s["step_s"]);
    CHECK(fit.segments.size() == m.steps.size() + 1);
    CHECK(time_error_rms(fit, m, truth["duration_s"].get<double>() - 1) < 100e-6);
  }
  fs::remove_all(dir);
}
