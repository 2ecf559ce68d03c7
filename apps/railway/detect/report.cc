// The detector's reports: CSV rows, GeoJSON features, and scoring against a simulated log's truth.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "detect.h"

namespace railway_detect {

namespace {

std::ofstream open_out(const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  return out;
}

}  // namespace

void write_csv(const std::vector<LogResult>& rs, const std::string& path) {
  auto out = open_out(path);
  out << "log,start_chainage_m,end_chainage_m,km_post,offset_m,class,confidence,irregularity_mm,x_m,y_m,lat,lon,degraded\n";
  for (const auto& r : rs)
    for (const auto& d : r.detections)
      out << fmt::format("{},{:.2f},{:.2f},{:g},{:.2f},{},{:.3f},{:.2f},{:.2f},{:.2f},{:.7f},{:.7f},{}\n", r.log, d.start_m,
                         d.end_m, d.km_post, d.offset_m, class_name(d.kind), d.confidence, d.irregularity_mm, d.x_m, d.y_m,
                         d.lat, d.lon, r.degraded ? 1 : 0);
}

void write_geojson(const std::vector<LogResult>& rs, const std::string& path) {
  nlohmann::json features = nlohmann::json::array();
  for (const auto& r : rs)
    for (const auto& d : r.detections) {
      if (!std::isfinite(d.lat)) throw std::runtime_error(r.log + "/line.json: no origin, so no map position for " + path);
      features.push_back({{"type", "Feature"},
                          {"geometry", {{"type", "Point"}, {"coordinates", {d.lon, d.lat}}}},
                          {"properties",
                           {{"log", r.log},
                            {"class", class_name(d.kind)},
                            {"start_chainage_m", d.start_m},
                            {"end_chainage_m", d.end_m},
                            {"km_post", d.km_post},
                            {"offset_m", d.offset_m},
                            {"confidence", d.confidence},
                            {"irregularity_mm", d.irregularity_mm},
                            {"degraded", r.degraded}}}});
    }
  open_out(path) << nlohmann::json{{"type", "FeatureCollection"}, {"features", features}}.dump(1) << "\n";
}

Score score(const LogResult& r, const std::string& log_dir, double tolerance_m) {
  std::ifstream in(log_dir + "/truth.json");
  if (!in) throw std::runtime_error(log_dir + "/truth.json: missing (--score needs the simulator's truth)");
  auto truth = nlohmann::json::parse(in);
  struct True {
    int kind;
    double a, b;
  };
  std::vector<True> defects;
  int64_t not_scanned = 0;
  for (auto& d : truth.at("defects")) {
    std::string kind = d.at("kind");
    int k = 0;
    for (int c = 1; c < 5; ++c)
      if (kind == class_name(c)) k = c;
    double a = d.at("chainage"), b = a + d.at("length").get<double>();
    // Only what the detector looked at: the chainage its windows' middle halves covered, less the
    // stretches where the log holds no axle-box data (said apart).
    if (k == 0 || b < r.covered_from_m || a >= r.covered_to_m) continue;
    bool unseen = false;
    for (auto& [from, to] : r.not_scanned) unseen |= a >= from && b <= to;
    if (unseen) {
      ++not_scanned;
      continue;
    }
    defects.push_back({k, a, b});
  }
  auto near = [&](const Detection& d, const True& t) {
    return d.kind == t.kind && d.start_m <= t.b + tolerance_m && d.end_m >= t.a - tolerance_m;
  };
  Score s;
  s.not_scanned = not_scanned;
  s.detections = static_cast<int64_t>(r.detections.size());
  s.true_defects = static_cast<int64_t>(defects.size());
  for (auto& d : r.detections) {
    bool hit = false;
    for (auto& t : defects) hit |= near(d, t);
    s.matched_detections += hit;
  }
  for (auto& t : defects) {
    bool hit = false;
    for (auto& d : r.detections) hit |= near(d, t);
    s.found_defects += hit;
    if (!hit) s.missed.push_back(fmt::format("{} at {:.1f} m", class_name(t.kind), t.a));
  }
  s.precision = s.detections ? double(s.matched_detections) / double(s.detections) : 1.0;
  s.recall = s.true_defects ? double(s.found_defects) / double(s.true_defects) : 1.0;
  return s;
}

}  // namespace railway_detect
