// railway-detect: a trained railway model over new logs; one row per defect found.
//
//   railway-detect --model CHECKPOINT --in LOGDIR [--out defects.csv] [--geojson defects.geojson] [--score]
//   railway-detect --model CHECKPOINT --logs DIR... (one task per log across the cluster)
//
// Each log is aligned (clocks against the GNSS time reference, position along the track; truth
// files are never opened unless --score asks for them), turned into distance-domain tokens, and
// the model runs over its windows in batches on every core. Overlapping findings are merged; each
// defect gets its start and end chainage, km post and offset, class, confidence, the track's
// irregularity amplitude there and its map position. A log without a usable time reference is
// still scanned on its raw clocks and odometer distance, and its rows are flagged degraded.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "detect.h"
#include "yard/yard.h"

namespace {

// One log as a remote task: the model is read once per worker process.
railway_detect::LogResult detect_task(std::string model, std::string log) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<railway_detect::DefectModel>> cache;
  const railway_detect::DefectModel* m;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto& slot = cache[model];
    if (!slot) slot = std::make_unique<railway_detect::DefectModel>(model);
    m = slot.get();
  }
  return m->detect(log, 1);
}

bool wants_cluster(int argc, char** argv) {
  if (const char* w = std::getenv("YARD_WORKER"); w && std::string(w) == "1") return true;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--logs") return true;
  return false;
}

void summary(const railway_detect::LogResult& r) {
  std::map<std::string, int> by;
  for (auto& d : r.detections) ++by[railway_detect::class_name(d.kind)];
  std::string kinds;
  for (auto& [k, n] : by) kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  double gap_m = 0;
  for (auto& [from, to] : r.not_scanned) gap_m += to - from;
  std::printf("%s: %zu defects%s%s%s over %.2f km in %.1f s (%.0fx real time)%s%s\n", r.log.c_str(), r.detections.size(),
              kinds.empty() ? "" : " (", kinds.c_str(), kinds.empty() ? "" : ")",
              (r.covered_to_m - r.covered_from_m - gap_m) / 1000.0, r.seconds,
              r.train_seconds / std::max(1e-9, r.seconds), r.note.empty() ? "" : "; ", r.note.c_str());
  for (auto& [from, to] : r.not_scanned)
    std::printf("  not scanned: %.1f-%.1f m (no axle-box data; defects there are unknown)\n", from, to);
}

}  // namespace

YARD_REMOTE(detect_task);

int main(int argc, char** argv) {
  if (wants_cluster(argc, argv)) yard::init(argc, argv);
  CLI::App app{"Find defects in railway logs with a trained model.", "railway-detect"};
  std::string model, in, out = "defects.csv", geojson;
  std::vector<std::string> logs;
  bool score = false;
  double tolerance = 2.0;
  app.add_option("--model", model, "checkpoint file, or a directory of them (the newest that verifies)")->required();
  auto* one = app.add_option("--in", in, "a log directory");
  auto* many = app.add_option("--logs", logs, "log directories, one task each across the cluster");
  one->excludes(many);
  app.add_option("--out", out, "CSV, one row per defect")->default_val("defects.csv");
  app.add_option("--geojson", geojson, "also a GeoJSON FeatureCollection (points, WGS84)");
  app.add_flag("--score", score, "compare with the simulator's truth.json: precision and recall of the defects");
  app.add_option("--tolerance", tolerance, "with --score: metres a detection may lie from its defect")->default_val(2.0);
  CLI11_PARSE(app, argc, argv);
  if (in.empty() && logs.empty()) {
    std::fprintf(stderr, "railway-detect: give --in LOGDIR or --logs DIR...\n");
    return 2;
  }
  try {
    std::vector<railway_detect::LogResult> results;
    if (!in.empty()) {
      railway_detect::DefectModel m(model);
      results.push_back(m.detect(in));
    } else {
      railway_detect::DefectModel check(model);  // a bad checkpoint is reported here, once
      std::vector<yard::ObjectRef<railway_detect::LogResult>> refs;
      for (auto& l : logs) refs.push_back(yard::task(detect_task).remote(check.path(), l));
      for (size_t i = 0; i < refs.size(); ++i) results.push_back(*refs[i].get());
    }
    int64_t matched = 0, detections = 0, found = 0, defects = 0;
    for (auto& r : results) {
      summary(r);
      if (!score) continue;
      auto s = railway_detect::score(r, r.log, tolerance);
      std::printf("  score at ±%g m: precision %.3f (%lld of %lld detections), recall %.3f (%lld of %lld defects)\n",
                  tolerance, s.precision, static_cast<long long>(s.matched_detections),
                  static_cast<long long>(s.detections), s.recall, static_cast<long long>(s.found_defects),
                  static_cast<long long>(s.true_defects));
      if (s.not_scanned) std::printf("  %lld defects lie in stretches not scanned (not counted)\n", static_cast<long long>(s.not_scanned));
      for (size_t k = 0; k < s.missed.size() && k < 5; ++k) std::printf("  missed: %s\n", s.missed[k].c_str());
      matched += s.matched_detections, detections += s.detections, found += s.found_defects, defects += s.true_defects;
    }
    if (score && results.size() > 1)
      std::printf("all logs: precision %.3f, recall %.3f\n", detections ? double(matched) / double(detections) : 1.0,
                  defects ? double(found) / double(defects) : 1.0);
    railway_detect::write_csv(results, out);
    if (!geojson.empty()) railway_detect::write_geojson(results, geojson);
    std::printf("defects: %s%s%s\n", out.c_str(), geojson.empty() ? "" : ", ", geojson.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "railway-detect: %s\n", e.what());
    return 1;
  }
}
