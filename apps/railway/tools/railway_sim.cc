// railway-sim: generates a line, a train run and its sensor logs with drifting clocks, plus the
// ground truth.
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "yard/railway/sim.h"

int main(int argc, char** argv) {
  CLI::App app{"Simulate a train's onboard sensor logs, with the ground truth alongside.", "railway-sim"};
  uint64_t seed = 1;
  std::string out;
  double length_km = 30, duration_s = 3600;
  double imu_hz = 200, axlebox_hz = 2500, odo_hz = 20;
  std::string bad_logger;
  app.add_option("--seed", seed, "random seed: the same seed gives the same bytes")->default_val(1);
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--length-km", length_km, "line length")->default_val(30);
  app.add_option("--duration-s", duration_s, "stop after this much train time")->default_val(3600);
  app.add_option("--imu-hz", imu_hz, "IMU rate (>= 100)")->default_val(200)->check(CLI::Range(100.0, 2000.0));
  app.add_option("--axlebox-hz", axlebox_hz, "axle-box accelerometer rate (>= 2500)")->default_val(2500)->check(CLI::Range(2500.0, 25000.0));
  app.add_option("--odometer-hz", odo_hz, "odometer rate (10-50)")->default_val(20)->check(CLI::Range(10.0, 50.0));
  app.add_option("--bad-logger", bad_logger, "give this sensor's clock a 1600 ppm drift (gnss, odometer, imu, axlebox, balise)");
  CLI11_PARSE(app, argc, argv);

  auto cfg = yard::railway::default_config(seed);
  cfg.length_m = length_km * 1000;
  cfg.max_duration_s = duration_s;
  cfg.sensors["imu"].rate_hz = imu_hz;
  cfg.sensors["axlebox"].rate_hz = axlebox_hz;
  cfg.sensors["odometer"].rate_hz = odo_hz;
  cfg.bad_logger = bad_logger;
  auto t0 = std::chrono::steady_clock::now();
  try {
    auto s = yard::railway::simulate(cfg, out);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("simulated %.0f s of train time over %.1f km in %.1f s -> %s\n", s.duration_s, s.distance_m / 1000, wall,
                out.c_str());
    for (auto& [name, n] : s.records) std::printf("  %-9s %llu records\n", name.c_str(), static_cast<unsigned long long>(n));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "railway-sim: %s\n", e.what());
    return 1;
  }
  return 0;
}
