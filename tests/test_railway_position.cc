// Along-track position against the simulator's truth: GNSS + balise + odometer within a metre,
// through a 30 s GNSS outage within 10 m, and slip/slide episodes found.
#include <catch2/catch.hpp>

#include <filesystem>

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
