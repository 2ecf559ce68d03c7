// Finding defects in a log with a trained model: what railway-detect does for one log, in parts a
// program (or a remote task) can call. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "yard/codec.h"
#include "yard/railway/sim.h"

namespace railway_detect {

// One defect found: where (chainage, km post, map position), what, how sure.
struct Detection {
  double start_m = 0, end_m = 0;  // chainage
  int kind = 0;                   // yard::railway::DefectClass
  double confidence = 0;          // the model's probability for the class
  double irregularity_mm = 0;     // the track's irregularity amplitude (D1 band) around it
  double km_post = 0, offset_m = 0;  // the km post at or before the start (km) and the distance past it
  double x_m = 0, y_m = 0;        // on the line's local plane (east, north)
  double lat = 0, lon = 0;        // WGS84 where the line has an origin (NaN otherwise)
  YARD_FIELDS(start_m, end_m, kind, confidence, irregularity_mm, km_post, offset_m, x_m, y_m, lat, lon);
};

// What one log gave.
struct LogResult {
  std::string log;
  std::vector<Detection> detections;
  bool degraded = false;      // no usable GNSS time reference: odometer-only chainage, raw clocks
  std::string note;           // why degraded, what was skipped
  double train_seconds = 0;   // the log's duration
  double covered_from_m = 0, covered_to_m = 0;  // the chainage the windows covered
  // Stretches inside that range no window could look at (the axle box recorded nothing there: a
  // logger dropout), as (from, to) chainage: what is there is unknown, not absent.
  std::vector<std::pair<double, double>> not_scanned;
  double seconds = 0;         // wall time spent on it
  YARD_FIELDS(log, detections, degraded, note, train_seconds, covered_from_m, covered_to_m, not_scanned, seconds);
};

// A trained model read from a checkpoint (a file, or a directory whose newest checkpoint that
// verifies is taken). Throws std::runtime_error naming the file and what does not fit.
class DefectModel {
 public:
  explicit DefectModel(const std::string& checkpoint);
  ~DefectModel();
  DefectModel(DefectModel&&) noexcept;
  const std::string& path() const;

  // Aligns the log (no truth files are opened), computes its tokens, runs the model over its
  // windows in batches and merges overlapping detections.
  // threads: LibTorch's intra-op threads (0: every core).
  LogResult detect(const std::string& log_dir, int threads = 0) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

inline const char* class_name(int kind) { return yard::railway::defect_name(static_cast<yard::railway::DefectClass>(kind)); }

// Scoring against the simulator's truth.json: a true defect is found when a detection of its class
// lies within `tolerance_m` of it (corrugation: overlaps it widened by the tolerance).
struct Score {
  int64_t detections = 0, true_defects = 0, matched_detections = 0, found_defects = 0;
  double precision = 0, recall = 0;
  std::vector<std::string> missed;  // "squat at 1234.5 m"
  int64_t not_scanned = 0;          // defects wholly in a stretch the log did not cover (not counted above)
};
Score score(const LogResult& r, const std::string& log_dir, double tolerance_m = 2.0);

void write_csv(const std::vector<LogResult>& rs, const std::string& path);
void write_geojson(const std::vector<LogResult>& rs, const std::string& path);

}  // namespace railway_detect
