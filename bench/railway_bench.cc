// bench/run railway: the alignment measured against the simulator's ground truth on a generated
// train-hour. Cases so far: time_error_rms_us and time_error_max_us (all sensors with PPS).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "yard/railway/align.h"
#include "yard/railway/sim.h"

int main() {
  namespace fs = std::filesystem;
  auto dir = (fs::temp_directory_path() / ("yard-railway-bench-" + std::to_string(getpid()))).string();
  auto cfg = yard::railway::default_config(2024);
  cfg.length_m = 120000;
  cfg.max_duration_s = 3600;
  yard::railway::simulate(cfg, dir);
  auto t0 = std::chrono::steady_clock::now();
  auto r = yard::railway::align_clocks(dir);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double ss = 0, mx = 0;
  int n = 0;
  for (auto& [name, rep] : r) {
    if (!rep.error_rms_s) continue;
    ss += *rep.error_rms_s * *rep.error_rms_s;
    mx = std::max(mx, *rep.error_max_s);
    ++n;
  }
  std::printf("{\"suite\":\"railway\",\"case\":\"time_error_rms_us\",\"value\":%.3f,\"unit\":\"us\"}\n", std::sqrt(ss / n) * 1e6);
  std::printf("{\"suite\":\"railway\",\"case\":\"time_error_max_us\",\"value\":%.3f,\"unit\":\"us\"}\n", mx * 1e6);
  std::printf("{\"suite\":\"railway\",\"case\":\"clock_fit_seconds\",\"value\":%.4f,\"unit\":\"s\"}\n", wall);
  fs::remove_all(dir);
  return 0;
}
