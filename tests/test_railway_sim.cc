// The railway simulator against its own ground truth.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "yard/railway/sim.h"

using namespace yard::railway;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& tag) {
  auto d = fs::temp_directory_path() / ("yard-sim-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  return d.string();
}

std::vector<std::vector<double>> read_csv(const std::string& path, size_t max_rows = SIZE_MAX) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  std::vector<std::vector<double>> rows;
  while (rows.size() < max_rows && std::getline(in, line)) {
    std::vector<double> r;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) r.push_back(std::atof(cell.c_str()));
    rows.push_back(r);
  }
  return rows;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

SimConfig small(uint64_t seed) {
  auto c = default_config(seed);
  c.length_m = 10000;
  c.max_duration_s = 1200;
  return c;
}

// One shared run for the checks that only read.
struct Run {
  std::string dir;
  SimSummary sum;
  nlohmann::json truth, line;
  Run() : dir(temp_dir("shared")) {
    sum = simulate(small(42), dir);
    truth = nlohmann::json::parse(slurp(dir + "/truth.json"));
    line = nlohmann::json::parse(slurp(dir + "/line.json"));
  }
  ~Run() { fs::remove_all(dir); }
};
Run& run() {
  static Run r;
  return r;
}

}  // namespace

TEST_CASE("the same seed gives the same bytes; another seed does not", "[railway][sim]") {
  auto a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("c");
  auto cfg = small(7);
  cfg.max_duration_s = 300;
  simulate(cfg, a);
  simulate(cfg, b);
  auto other = small(8);
  other.max_duration_s = 300;
  simulate(other, c);
  for (auto f : {"gnss.csv", "odometer.csv", "imu.csv", "axlebox.csv", "balise.csv", "imu_pps.csv", "truth.csv",
                 "line.json", "truth.json"}) {
    INFO(f);
    CHECK(slurp(a + "/" + f) == slurp(b + "/" + f));
  }
  CHECK(slurp(a + "/imu.csv") != slurp(c + "/imu.csv"));
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(c);
}

TEST_CASE("the train runs the whole line within its speed limits", "[railway][sim]") {
  auto& r = run();
  CHECK(r.sum.distance_m > 9990);
  auto truth = read_csv(r.dir + "/truth.csv");
  REQUIRE(truth.size() > 39000);  // every 0.25 m
  Line L = make_line(42, 10000);
  double prev_t = -1;
  int over = 0, backwards = 0;
  for (auto& row : truth) {
    over += row[2] > L.limit(row[0]) + 0.01;
    backwards += row[1] < prev_t;
    prev_t = row[1];
  }
  CHECK(over == 0);
  CHECK(backwards == 0);
}

TEST_CASE("every defect class appears in the labels", "[railway][sim]") {
  auto truth = read_csv(run().dir + "/truth.csv");
  std::map<int, int> seen;
  for (auto& row : truth) seen[static_cast<int>(row[3])]++;
  for (int c = 0; c <= 4; ++c) {
    INFO("class " << defect_name(static_cast<DefectClass>(c)));
    CHECK(seen[c] > 0);
  }
}

TEST_CASE("every defect, however short, labels the truth rows of the cells it touches", "[railway][sim]") {
  auto truth = read_csv(run().dir + "/truth.csv");
  std::ifstream in(run().dir + "/truth.json");
  auto j = nlohmann::json::parse(in);
  int checked = 0, short_ones = 0;
  for (auto& d : j["defects"]) {
    double a = d["chainage"], len = d["length"];
    size_t row = static_cast<size_t>(a / 0.25);
    if (row >= truth.size()) continue;
    ++checked;
    short_ones += len < 0.25;
    INFO(d.dump());
    CHECK(truth[row][3] != 0);  // this defect's class, or a more severe one touching the same cell
  }
  CHECK(checked > 20);
  CHECK(short_ones > 10);  // joints and welds are centimetres long: each still has its row
}

TEST_CASE("sensor rates match their configuration, less the dropouts", "[railway][sim]") {
  auto& r = run();
  double d = r.sum.duration_s;
  CHECK(r.sum.records["axlebox"] > 0.95 * d * 2500);
  CHECK(r.sum.records["axlebox"] <= d * 2500 + 1);
  CHECK(r.sum.records["imu"] > 0.95 * d * 200);
  CHECK(r.sum.records["odometer"] > 0.95 * d * 20);
  CHECK(r.sum.records["balise"] > 2 * 8);  // two balises per group, a group every ~km
}

TEST_CASE("the PPS pairs recover each planted clock's offset and drift", "[railway][sim][clocks]") {
  auto& r = run();
  for (std::string name : {"imu", "axlebox", "gnss", "balise"}) {
    INFO(name);
    auto c = r.truth["clocks"][name];
    double first_step = 1e18;
    for (auto& s : c["steps"]) first_step = std::min(first_step, s["time_s"].get<double>());
    // Least squares of local against reference time before the first step, without the edges
    // counted in the wrong second.
    double sx = 0, sy = 0, sxx = 0, sxy = 0, lo = 1e18, hi = -1e18;
    int n = 0;
    for (auto& row : read_csv(r.dir + "/" + name + "_pps.csv")) {
      double ref = row[1], local = row[0];
      if (ref >= first_step) continue;
      double predicted = c["offset_s"].get<double>() + (1 + c["drift_ppm"].get<double>() * 1e-6) * ref;
      if (std::abs(local - predicted) > 0.5) continue;
      sx += ref, sy += local, sxx += ref * ref, sxy += ref * local;
      lo = std::min(lo, ref), hi = std::max(hi, ref);
      ++n;
    }
    REQUIRE(n > 100);
    double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    double icpt = (sy - slope * sx) / n;
    // The fit is as good as the capture jitter allows: 5 sigma of the slope and intercept.
    double jitter = c["jitter_s"].get<double>(), span = hi - lo;
    double slope_sigma = jitter * std::sqrt(12.0 / n) / span;
    CHECK(std::abs((slope - 1) * 1e6 - c["drift_ppm"].get<double>()) < 5 * slope_sigma * 1e6 + 0.01);
    CHECK(std::abs(icpt - c["offset_s"].get<double>()) < 5 * (jitter * 2 / std::sqrt(n) + slope_sigma * hi) + 1e-6);
  }
}

TEST_CASE("GNSS is silent in tunnels; the long tunnel gives an outage over 30 s", "[railway][sim][gnss]") {
  auto& r = run();
  double longest = 0;
  for (auto& o : r.truth["events"]["gnss_outages"]) longest = std::max(longest, o[1].get<double>() - o[0].get<double>());
  CHECK(longest > 30);
  auto gnss = read_csv(r.dir + "/gnss.csv");
  int inside = 0;
  for (auto& row : gnss)
    for (auto& o : r.truth["events"]["gnss_outages"]) inside += row[1] >= o[0].get<double>() + 1 && row[1] < o[1].get<double>() - 1;
  CHECK(inside == 0);
}

TEST_CASE("slip and slide episodes are recorded with the odometer", "[railway][sim]") {
  auto cfg = small(3);
  auto d = temp_dir("slip");
  auto s = simulate(cfg, d);
  auto t = nlohmann::json::parse(slurp(d + "/truth.json"));
  CHECK(t["events"]["slip_slide"].size() > 0);
  CHECK(std::abs(t["events"]["odometer_scale"].get<double>() - 1) <= 0.02);
  fs::remove_all(d);
  (void)s;
}

TEST_CASE("a bad logger drifts 1600 ppm; an unknown one is an error", "[railway][sim][clocks]") {
  auto cfg = small(5);
  cfg.max_duration_s = 60;
  cfg.bad_logger = "imu";
  auto d = temp_dir("bad");
  simulate(cfg, d);
  auto t = nlohmann::json::parse(slurp(d + "/truth.json"));
  CHECK(t["clocks"]["imu"]["drift_ppm"].get<double>() == 1600);
  cfg.bad_logger = "radar";
  CHECK_THROWS_WITH(simulate(cfg, d), Catch::Contains("radar"));
  fs::remove_all(d);
}
