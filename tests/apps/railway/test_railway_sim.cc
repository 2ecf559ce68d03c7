// The railway simulator against its own ground truth.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "yard/railway/nmea.h"
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

// A logger's clock as the truth records it.
ClockModel planted(const nlohmann::json& c) {
  ClockModel m;
  m.offset_s = c["offset_s"];
  m.drift_ppm = c["drift_ppm"];
  for (auto& st : c["steps"]) m.steps.emplace_back(st["time_s"], st["step_s"]);
  return m;
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
  for (auto f : {"gnss.nmea", "imu_time.nmea", "odometer.csv", "imu.csv", "axlebox.csv", "balise.csv", "imu_pps.csv", "truth.csv",
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

TEST_CASE("PPS edges sit on each planted clock's seconds, unlabelled, with missed and spurious ones", "[railway][sim][clocks]") {
  auto& r = run();
  for (std::string name : {"imu", "axlebox", "gnss", "balise"}) {
    INFO(name);
    auto c = r.truth["clocks"][name];
    ClockModel m = planted(c);
    double jitter = c["jitter_s"];
    auto edges = read_csv(r.dir + "/" + name + "_pps.csv");
    REQUIRE(!edges.empty());
    CHECK(edges[0].size() == 1);  // the local time only: which second is not written
    // Each edge either marks a whole second on the planted clock (within 6 sigma of the jitter)
    // or is noise.
    std::set<long> seconds;
    int off = 0;
    for (auto& row : edges) {
      double local = row[0];
      double t = (local - m.offset_s) / (1 + m.drift_ppm * 1e-6);
      bool on = false;
      for (double cand = std::floor(t) - 1; cand <= std::ceil(t) + 1 && !on; cand += 1)
        if (std::abs(m.local(cand) - local) < 6 * jitter + 1e-7) {
          on = true;
          seconds.insert(static_cast<long>(cand));
        }
      off += !on;
    }
    long spurious = r.truth["events"]["pps"][name]["spurious"], missed = r.truth["events"]["pps"][name]["missed"];
    CHECK(off == spurious);
    double expected = std::ceil(r.sum.duration_s) - 1;  // the seconds 1, 2, ... before the end
    CHECK(missed > 0.02 * expected);
    CHECK(missed < 0.09 * expected);
    CHECK(seconds.size() <= expected - missed);
    CHECK(seconds.size() > 0.85 * expected);  // the rest missed, or in a logger dropout
  }
}

TEST_CASE("every logger with PPS has the receiver's time messages, 10-700 ms after each edge", "[railway][sim][clocks]") {
  auto& r = run();
  for (std::string name : {"imu", "axlebox", "gnss", "balise"}) {
    INFO(name);
    auto c = r.truth["clocks"][name];
    ClockModel m = planted(c);
    NmeaReader rd(r.dir + "/" + name + (name == "gnss" ? ".nmea" : "_time.nmea"));
    NmeaRecord rec;
    std::set<long> named;
    int late = 0, n = 0;
    while (rd.next(rec)) {
      if (rec.kind != NmeaKind::kZda) continue;
      ++n;
      named.insert(std::lround(rec.utc));
      double latency = (rec.local - m.local(rec.utc)) / (1 + m.drift_ppm * 1e-6);
      bool step_between = false;  // a clock step between the edge and the message moves it
      for (auto& [when, step] : m.steps) step_between |= when > rec.utc && when <= rec.utc + 1;
      if (!step_between) late += latency < 0.009 || latency > 0.75;
    }
    CHECK(late == 0);
    CHECK(named.size() == static_cast<size_t>(n));  // one ZDA per second
    CHECK(n > 0.9 * r.sum.duration_s);
    auto bad = r.truth["events"]["nmea_corrupted"][name];
    CHECK(rd.summary().dropped_total() == bad.value("bad_checksum", 0u) + bad.value("malformed", 0u));
  }
}

TEST_CASE("GNSS has no fix in tunnels, while its time keeps going; the long tunnel gives an outage over 30 s", "[railway][sim][gnss]") {
  auto& r = run();
  double longest = 0;
  for (auto& o : r.truth["events"]["gnss_outages"]) longest = std::max(longest, o[1].get<double>() - o[0].get<double>());
  CHECK(longest > 30);
  NmeaReader rd(r.dir + "/gnss.nmea");
  NmeaRecord rec;
  int fixes_inside = 0, times_inside = 0, fixes = 0;
  while (rd.next(rec)) {
    bool inside = false;
    for (auto& o : r.truth["events"]["gnss_outages"]) inside |= rec.utc >= o[0].get<double>() + 1 && rec.utc < o[1].get<double>() - 1;
    fixes += rec.fix;
    if (inside) fixes_inside += rec.fix, times_inside += rec.kind == NmeaKind::kZda;
  }
  CHECK(fixes > 0.8 * r.sum.duration_s);
  CHECK(fixes_inside == 0);
  CHECK(times_inside > 25);
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
