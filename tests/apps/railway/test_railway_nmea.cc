// NMEA capture reading, the local plane, and pairing unlabelled PPS edges with time messages.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "yard/railway/align.h"
#include "yard/railway/clock_fit.h"
#include "yard/railway/nmea.h"

using namespace yard::railway;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& tag) {
  return (fs::temp_directory_path() / ("yard-nmea-" + tag + "-" + std::to_string(getpid()))).string();
}

}  // namespace

TEST_CASE("sentences carry the XOR checksum receivers write", "[railway][nmea]") {
  // The textbook GGA sentence and its checksum.
  CHECK(nmea_sentence("GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,") ==
        "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47");
}

TEST_CASE("the local plane and WGS84 convert both ways", "[railway][nmea]") {
  PlaneOrigin o{47.3769, 8.5417};
  for (auto [x, y] : {std::pair{0.0, 0.0}, {12345.6, -7890.1}, {-30000.0, 25000.0}}) {
    auto [lat, lon] = plane_to_wgs84(o, x, y);
    auto [x2, y2] = wgs84_to_plane(o, lat, lon);
    CHECK(std::abs(x2 - x) < 1e-6);
    CHECK(std::abs(y2 - y) < 1e-6);
  }
  auto [lat, lon] = plane_to_wgs84(o, 0, 1000);  // a kilometre north: about 0.009 degrees
  CHECK(std::abs(lat - o.lat - 0.008993) < 1e-5);
  CHECK(lon == o.lon);
}

TEST_CASE("a capture reads back: positions, speed, times across midnight; bad lines counted and skipped", "[railway][nmea]") {
  auto path = temp_path("capture");
  UtcDate d{2026, 12, 31};
  {
    std::ofstream f(path);
    f << "10.000000 " << nmea_sentence("GPGGA,235958.00,,,,,0,00,99.9,,M,,M,,") << "\n";  // no date yet
    f << "10.100000 " << nmea_sentence(nmea_rmc(d, 86398, std::pair{47.5, -8.25}, 20.0, 90)) << "\n";
    f << "10.120000 " << nmea_sentence(nmea_gga(d, 86398, std::pair{47.5, -8.25}, 11, 0.8)) << "\n";
    f << "10.140000 " << nmea_sentence(nmea_zda(d, 86398)) << "\n";
    auto flipped = nmea_sentence(nmea_zda(d, 86399));
    flipped[10] = flipped[10] == '1' ? '2' : '1';
    f << "11.100000 " << flipped << "\n";                                                     // bad checksum
    f << "11.200000 " << nmea_sentence(nmea_zda(d, 86399)).substr(0, 20) << "\n";             // cut short
    f << "11.300000 " << nmea_sentence("GPGSV,1,1,01,05,45,120,38") << "\n";                  // not used
    f << "garbage\n";                                                                          // no timestamp
    f << "12.120000 " << nmea_sentence(nmea_gga(d, 86400, std::nullopt, 3, 99)) << "\n";      // past midnight, no fix
    f << "12.140000 " << nmea_sentence(nmea_zda(d, 86400.0)) << "\n";
    f << "13.100000 " << nmea_sentence(nmea_rmc(d, 86401, std::nullopt, 0, 0)) << "\n";
    // Numbers no int holds: a year of 22 digits, 10^30 satellites (both once read as UB).
    f << "13.200000 " << nmea_sentence("GPZDA,000002.00,01,01,2025560000000000000000,00,00") << "\n";
    f << "13.300000 " << nmea_sentence("GPGGA,000003.00,,,,,0,1e30,99.9,,M,,M,,") << "\n";
  }
  NmeaReader r(path);
  std::vector<NmeaRecord> recs;
  NmeaRecord rec;
  while (r.next(rec)) recs.push_back(rec);
  REQUIRE(recs.size() == 6);
  CHECK(recs[0].kind == NmeaKind::kRmc);
  CHECK(recs[0].fix);
  CHECK(recs[0].utc == 86398);
  CHECK(std::abs(recs[0].lat - 47.5) < 1e-7);
  CHECK(std::abs(recs[0].lon + 8.25) < 1e-7);
  CHECK(std::abs(recs[0].speed_mps - 20.0) < 1e-3);
  CHECK(recs[1].kind == NmeaKind::kGga);
  CHECK(recs[1].sats == 11);
  CHECK(recs[2].kind == NmeaKind::kZda);
  CHECK(recs[2].local == 10.14);
  CHECK(recs[3].kind == NmeaKind::kGga);
  CHECK(!recs[3].fix);
  CHECK(recs[3].utc == 86400);  // the GGA past midnight is on the next day
  CHECK(recs[4].utc == 86400);  // ZDA: 00:00:00 of 2027-01-01
  CHECK(recs[5].utc == 86401);
  CHECK(!recs[5].fix);
  auto s = r.summary();
  CHECK(s.dropped["bad_checksum"] == 1);
  CHECK(s.dropped["malformed"] == 5);  // the undated GGA, the cut one, the garbage line, the huge numbers
  CHECK(s.dropped["unknown_type"] == 1);
  CHECK(s.to_string().find(path + ":1:") != std::string::npos);

  ReadPolicy strict;
  strict.bad_checksum = OnBad::kStop;
  strict.malformed = OnBad::kDrop;
  NmeaReader r2(path, strict);
  try {
    while (r2.next(rec)) {
    }
    FAIL("a bad checksum should stop a strict read");
  } catch (const ReadError& e) {
    CHECK(e.line() == 5);
    CHECK(std::string(e.what()).find("checksum") != std::string::npos);
  }
  fs::remove(path);
}

namespace {

// A logger's view of the PPS line and the time messages: edges at whole seconds on a clock with
// offset, drift and a step; missed and spurious edges; messages 10-700 ms late, some lost.
struct Synthetic {
  std::vector<double> edges;
  std::vector<TimeMessage> msgs;
  std::set<long> missed, lost;
  int spurious = 0;
  double offset = 2.3, drift_ppm = 50, step_at = 1000.5, step = 0.3;
  double local(double t) const { return offset + (1 + drift_ppm * 1e-6) * t + (t >= step_at ? step : 0); }
  Synthetic(double drift, uint32_t seed) : drift_ppm(drift) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(0, 1);
    std::normal_distribution<double> jitter(0, 20e-6);
    for (long t = 1; t < 2000; ++t) {
      if (u(g) < 0.05) missed.insert(t);
      else edges.push_back(local(t) + jitter(g));
      if (u(g) < 0.01) {
        edges.push_back(local(t + 0.05 + 0.9 * u(g)));
        ++spurious;
      }
      if (u(g) < 0.01) lost.insert(t);
      else msgs.push_back({local(t + 0.01 + 0.69 * u(g)), double(t)});
    }
  }
};

}  // namespace

TEST_CASE("unlabelled PPS edges are paired with their seconds: missed, spurious and lost ones accounted", "[railway][clock]") {
  for (double drift : {50.0, -1600.0}) {  // an ordinary logger, and a bad one
    INFO("drift " << drift);
    Synthetic s(drift, 7);
    auto p = pair_pps_edges(s.edges, s.msgs);
    CHECK(p.edges == s.edges.size());
    CHECK(std::abs(static_cast<long>(p.off_grid) - s.spurious) <= 1);
    long wrong = 0;
    for (auto& [local, sec] : p.pairs) wrong += std::abs(local - s.local(sec)) > 1e-3;
    CHECK(wrong <= 1);  // at most the edge whose message the clock step overtook
    long lost_with_edge = 0, missed_with_msg = 0;
    for (long t : s.lost) lost_with_edge += !s.missed.count(t);
    for (long t : s.missed) missed_with_msg += !s.lost.count(t);
    // Besides those, a clock step between an edge and its message may push the message past
    // the latency allowed: one edge unlabelled, one message unused.
    CHECK(p.unlabelled - lost_with_edge <= 1);
    CHECK(p.messages_unused - missed_with_msg <= 1);
    CHECK(p.unlabelled >= static_cast<uint64_t>(lost_with_edge));
    CHECK(p.messages_unused >= static_cast<uint64_t>(missed_with_msg));
    CHECK(p.pairs.size() + 1 >= 1999 - s.missed.size() - lost_with_edge);
    // The fit over them recovers the clock.
    auto fit = fit_clock(p.pairs);
    CHECK(std::abs(fit.drift_ppm - drift) < 0.1);
    REQUIRE(fit.segments.size() == 2);
    CHECK(std::abs(fit.segments[1].offset_s - fit.segments[0].offset_s - s.step) < 1e-4);
  }
}

TEST_CASE("unlabelled edges without time messages are a clear error", "[railway][clock]") {
  auto dir = temp_path("nomsg");
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/imu_pps.csv");
    f << "local_time\n";
    for (int t = 1; t < 100; ++t) f << t + 0.25 << "\n";
  }
  CHECK_THROWS_WITH(align_clocks(dir, {}, false), Catch::Contains("imu_time.nmea") && Catch::Contains("imu_pps.csv"));
  fs::remove_all(dir);
}
