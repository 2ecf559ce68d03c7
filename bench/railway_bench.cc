// bench/run railway: the alignment measured against the simulator's ground truth on a generated
// train-hour: clock errors (all sensors with PPS), chainage errors, slip/slide flags, and the
// aligner's speed. (The model's cases are bench/detect_bench.py's.)
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "yard/railway/align.h"
#include "yard/railway/position.h"
#include "yard/railway/shards.h"
#include "yard/railway/sim.h"

int main() {
  namespace fs = std::filesystem;
  auto dir = (fs::temp_directory_path() / ("yard-railway-bench-" + std::to_string(getpid()))).string();
  auto cfg = yard::railway::default_config(2024);
  cfg.length_m = 120000;
  cfg.max_duration_s = 3600;
  yard::railway::simulate(cfg, dir);
  auto r = yard::railway::align_clocks(dir);
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
  auto t1 = std::chrono::steady_clock::now();
  auto track = yard::railway::estimate_position(dir, r);
  double pos_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  auto pr = yard::railway::evaluate_position(dir, track);
  auto emit = [](const char* name, double v, const char* unit) {
    std::printf("{\"suite\":\"railway\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\"}\n", name, v, unit);
  };
  emit("chainage_rms_m", pr.chainage_rms_m, "m");
  emit("chainage_outage30s_max_m", pr.outage_max_m, "m");
  emit("slip_detect_recall", pr.slip_recall, "fraction");
  emit("slip_detect_precision", pr.slip_precision, "fraction");  // flagging everything must not score
  // The whole aligner on one core: clocks, position, and the axle-box stream into distance-domain
  // windows — train-seconds of logs (all sensors) per wall second.
  auto t2 = std::chrono::steady_clock::now();
  auto windows = yard::railway::build_windows(dir, {});
  double all_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  (void)pos_wall;
  emit("aligner_x_realtime", r.begin()->second.fit.segments.back().ref_end / all_wall, "x");
  if (windows.empty()) return 1;
  fs::remove_all(dir);
  return 0;
}
