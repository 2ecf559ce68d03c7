// Along-track position against the simulator's truth: GNSS + balise + odometer within a metre,
// through a 30 s GNSS outage within 10 m, and slip/slide episodes found.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "yard/railway/position.h"
#include "yard/railway/sim.h"

using namespace yard::railway;
namespace fs = std::filesystem;

TEST_CASE("position filter meets its accuracy on generated runs", "[railway][position]") {
  for (uint64_t seed : {31, 32}) {
    INFO("seed " << seed);
    auto dir = (fs::temp_directory_path() / ("yard-pos-" + std::to_string(getpid()) + "-" + std::to_string(seed))).string();
    auto cfg = default_config(seed);
    cfg.length_m = 30000;
    cfg.max_duration_s = 1800;
    auto sum = simulate(cfg, dir);
    auto track = estimate_position(dir);
    REQUIRE(track.t.size() > 1000);
    auto r = evaluate_position(dir, track);
    CHECK(r.chainage_rms_m < 1.0);
    CHECK(r.outage_max_m < 10.0);
    CHECK(r.slip_recall >= 0.95);
    CHECK(track.gnss_rejected > 0);  // the cuttings' multipath outliers were caught
    CHECK(track.balises_used > 20);
    fs::remove_all(dir);
    (void)sum;
  }
}

TEST_CASE("a directory without the needed logs is a clear error", "[railway][position]") {
  auto dir = (fs::temp_directory_path() / ("yard-pos-empty-" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  CHECK_THROWS_WITH(estimate_position(dir), Catch::Contains("line.json"));
  fs::remove_all(dir);
}

TEST_CASE("railway-align --report writes the table, JSON and plots", "[railway][report]") {
  const char* bin = getenv("RAILWAY_ALIGN_BIN");
  REQUIRE(bin);
  auto dir = (fs::temp_directory_path() / ("yard-report-" + std::to_string(getpid()))).string();
  auto cfg = default_config(5);
  cfg.length_m = 8000;
  cfg.max_duration_s = 900;
  simulate(cfg, dir);
  std::string cmd = std::string(bin) + " --in " + dir + " --report --timebase 100 --json " + dir + "/report.json --shards " + dir +
                    "/shards > " + dir + "/out.txt 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream out(dir + "/out.txt");
  std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("err rms us") && Catch::Contains("chainage error: rms") && Catch::Contains("wrote"));
  for (auto f : {"time_error_over_time.svg", "position_error_over_time.svg", "position_error_over_chainage.svg",
                 "report.json", "shards/manifest.json", "shards/shard-00000.bin", "aligned/imu.csv", "aligned/odometer.csv"})
    CHECK(fs::exists(dir + "/" + f));
  std::ifstream j(dir + "/report.json");
  auto doc = nlohmann::json::parse(j);
  CHECK(doc["position"]["chainage_rms_m"].get<double>() < 5.0);  // accuracy is tested on longer runs
  CHECK(doc["imu"]["time_error_rms_us"].get<double>() < 100);
  // A missing directory is a clear error, not a crash.
  CHECK(std::system((std::string(bin) + " --in /nonexistent > /dev/null 2>&1").c_str()) != 0);
  fs::remove_all(dir);
}
