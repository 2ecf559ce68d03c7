// One log through the detector: alignment (or, without a time reference, the raw clocks), tokens,
// the model over the windows, the findings placed on the line.
#include "detect.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "detect_impl.h"
#include "yard/railway/align.h"
#include "yard/railway/position.h"

namespace fs = std::filesystem;

namespace railway_detect {

namespace {

constexpr double kTokenM = 0.25;

// Where a finding is: km post and offset past it, the line's plane, the globe.
void place(const yard::railway::TrackGeometry& line, Detection& d) {
  double at = d.start_m;
  std::tie(d.x_m, d.y_m) = line.point_at(at);
  double post = 0;
  for (double p : line.km_posts)
    if (p <= at) post = p;
  d.km_post = post / 1000.0;
  d.offset_m = at - post;
  if (line.origin) {
    std::tie(d.lat, d.lon) = yard::railway::plane_to_wgs84(*line.origin, d.x_m, d.y_m);
  } else {
    d.lat = d.lon = NAN;
  }
}

// The log's tokens, aligned when it can be (no truth file is opened); otherwise the raw clocks
// and odometer distance, with the reason in `note`.
yard::railway::TokenGrid tokens_of(const std::string& dir, bool& degraded, std::string& note) {
  try {
    auto clocks = yard::railway::align_clocks(dir, {}, false);
    auto axle = clocks.find("axlebox");
    if (axle == clocks.end()) throw std::runtime_error(dir + "/axlebox_pps.csv: missing (the axle-box clock cannot be aligned)");
    auto track = yard::railway::estimate_position(dir, clocks);
    if (track.gnss_used == 0) throw std::runtime_error(dir + ": no usable GNSS fix in gnss.nmea");
    degraded = false;
    return yard::railway::build_tokens(dir, true, &track, &axle->second.fit);
  } catch (const std::exception& e) {
    degraded = true;
    note = std::string("degraded: odometer-only chainage on the axle box's own clock (") + e.what() + ")";
    return yard::railway::build_tokens(dir, false);
  }
}

}  // namespace

struct DefectModel::Impl {
  WindowModel model;
  explicit Impl(const std::string& c) : model(c) {}
};

DefectModel::DefectModel(const std::string& checkpoint) : impl_(std::make_unique<Impl>(checkpoint)) {}
DefectModel::~DefectModel() = default;
DefectModel::DefectModel(DefectModel&&) noexcept = default;
const std::string& DefectModel::path() const { return impl_->model.path(); }

LogResult DefectModel::detect(const std::string& dir, int threads) const {
  auto t0 = std::chrono::steady_clock::now();
  LogResult r;
  r.log = dir;
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": not a log directory");
  if (!fs::exists(dir + "/axlebox.csv")) throw std::runtime_error(dir + "/axlebox.csv: missing (the axle-box accelerometer is what defects are found in)");
  auto line = yard::railway::TrackGeometry::load(dir + "/line.json");  // needed to place what is found
  auto grid = tokens_of(dir, r.degraded, r.note);
  const auto& m = impl_->model;
  if (!m.aligned() && !r.degraded) r.note = "the model was trained on unaligned logs";
  const int64_t T = m.tokens(), stride = m.stride();
  std::vector<size_t> starts;
  for (size_t start = 0; start + size_t(T) <= grid.size(); start += size_t(stride)) {
    int64_t empty = 0;
    for (int64_t j = 0; j < T; ++j) empty += grid.count[start + size_t(j)] == 0;
    if (empty <= T / 4) starts.push_back(start);
  }
  if (!starts.empty()) {
    r.covered_from_m = double(starts.front() + size_t(T / 4)) * kTokenM;
    r.covered_to_m = double(starts.back() + size_t(3 * T / 4)) * kTokenM;
    for (size_t i = 1; i < starts.size(); ++i) {
      size_t held_to = starts[i - 1] + size_t(3 * T / 4), next_from = starts[i] + size_t(T / 4);
      if (next_from > held_to) r.not_scanned.emplace_back(double(held_to) * kTokenM, double(next_from) * kTokenM);
    }
  }
  r.detections = find_defects(m.run(grid, starts, threads), T, kTokenM);
  for (auto& d : r.detections) place(line, d);
  r.train_seconds = grid.last_s - grid.first_s;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace railway_detect
