// The log readers on simulator output, on hand-made ETH-PBL lines, and on malformed, truncated
// and random input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "yard/railway/nmea.h"
#include "yard/railway/readers.h"
#include "yard/railway/sim.h"

using namespace yard::railway;
namespace fs = std::filesystem;

namespace {

std::string write_file(const std::string& name, const std::string& content) {
  auto p = (fs::temp_directory_path() / ("yard-readers-" + std::to_string(getpid()) + "-" + name)).string();
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto x : b) s += d[x >> 4], s += d[x & 15];
  return s;
}

std::string imu_hex(int16_t gx, int16_t gy, int16_t gz, int16_t ax, int16_t ay, int16_t az) {
  std::vector<uint8_t> b;
  for (int16_t v : {gx, gy, gz, ax, ay, az}) {
    b.push_back(static_cast<uint8_t>(v & 0xff));
    b.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
  }
  return hex(b);
}

EthPvt sample_pvt() {
  EthPvt p{};
  p.itow_ms = 294828400;
  p.year = 2022, p.month = 10, p.day = 19, p.hour = 9, p.minute = 35, p.second = 31;
  p.valid_date = p.valid_time = true;
  p.nano = -68911;
  p.fix_type = 3;
  p.fix_ok = true;
  p.carr_soln = 2;
  p.num_sv = 20;
  p.lon_deg = 10.9295529;
  p.lat_deg = 44.6550620;
  p.height_m = 81.5;
  p.hmsl_m = 38.25;
  p.hacc_m = 0.014;
  p.vacc_m = 0.021;
  p.vel_n = 12.345, p.vel_e = -3.5, p.vel_d = 0.01;
  p.ground_speed = 12.833;
  p.heading_deg = 344.12345;
  p.speed_acc = 0.05;
  return p;
}

}  // namespace

TEST_CASE("simulator logs read back completely, out-of-order records put back in order", "[railway][readers]") {
  auto dir = (fs::temp_directory_path() / ("yard-readers-sim-" + std::to_string(getpid()))).string();
  auto cfg = default_config(11);
  cfg.length_m = 5000;
  cfg.max_duration_s = 240;
  for (auto& [name, s] : cfg.sensors) s.out_of_order = 0.01;
  auto sum = simulate(cfg, dir);
  for (std::string name : {"imu", "odometer", "axlebox", "balise"}) {
    INFO(name);
    SensorCsvReader r(dir + "/" + name + ".csv");
    SensorRow row;
    uint64_t n = 0;
    double last = -1e300;
    bool ordered = true;
    while (r.next(row)) {
      ordered &= row.time >= last;
      last = row.time;
      ++n;
    }
    CHECK(ordered);
    CHECK(n == sum.records[name]);
    CHECK(r.summary().dropped_total() == 0);
    if (name == "imu") {
      CHECK(r.summary().reordered > 0);
      CHECK(r.columns().size() == 7);
    }
    if (name == "balise") CHECK(row.text.rfind("BG", 0) == 0);
  }
  {  // The GNSS capture: every sentence read, or dropped and counted as corrupt.
    NmeaReader r(dir + "/gnss.nmea");
    NmeaRecord rec;
    uint64_t n = 0;
    while (r.next(rec)) ++n;
    CHECK(n + r.summary().dropped_total() == sum.records["gnss"]);
    CHECK(n > 0.99 * sum.records["gnss"]);
  }
  // Dropping instead of reordering counts them.
  ReadPolicy drop;
  drop.non_monotonic = OnBad::kDrop;
  SensorCsvReader r(dir + "/imu.csv", drop);
  SensorRow row;
  while (r.next(row)) {
  }
  CHECK(r.summary().dropped.at("non_monotonic") > 0);
  fs::remove_all(dir);
}

TEST_CASE("malformed sensor lines are dropped and counted with file:line, or stop the read", "[railway][readers]") {
  std::string content =
      "local_time,speed_mps,distance_m\n"
      "1.0,2.0,3.0\n"
      "1.1,abc,3.1\n"        // line 3: not a number
      "1.2,2.0\n"            // line 4: too few columns
      "1.3,nan,3.3\n"        // line 5: NaN
      "1.4,inf,3.4\n"        // line 6: infinite
      "\n"
      "1.5,2.5,3.5\n"
      "1.6,2.6,3.";          // truncated last line still parses as a number
  auto p = write_file("bad.csv", content);
  SensorCsvReader r(p);
  SensorRow row;
  int n = 0;
  while (r.next(row)) ++n;
  CHECK(n == 3);
  auto& s = r.summary();
  CHECK(s.dropped.at("malformed") == 2);
  CHECK(s.dropped.at("non_finite") == 2);
  REQUIRE(s.examples.size() == 4);
  CHECK(s.examples[0].line == 3);
  CHECK_THAT(s.to_string(), Catch::Contains(p + ":3: column speed_mps is not a number"));
  CHECK_THAT(s.to_string(), Catch::Contains(p + ":4: expected 3 columns, found 2"));

  ReadPolicy strict;
  strict.malformed = OnBad::kStop;
  SensorCsvReader r2(p, strict);
  try {
    while (r2.next(row)) {
    }
    FAIL("no error");
  } catch (const ReadError& e) {
    CHECK(e.line() == 3);
    CHECK_THAT(e.what(), Catch::Contains(p + ":3:"));
  }
  auto noheader = write_file("noheader.csv", "1,2,3\n");
  CHECK_THROWS_AS(SensorCsvReader(noheader), ReadError);
  fs::remove(noheader);
  CHECK_THROWS_AS(SensorCsvReader("/nonexistent/file.csv"), ReadError);
  fs::remove(p);
}

TEST_CASE("random bytes never crash the readers", "[railway][readers]") {
  std::mt19937 rng(99);
  for (int i = 0; i < 200; ++i) {
    std::string junk(rng() % 4000, '\0');
    for (auto& c : junk) c = static_cast<char>(rng() % 4 == 0 ? ',' : rng() % 5 == 0 ? '\n' : rng());
    auto p1 = write_file("junk1.csv", "local_time,a,b\n" + junk);
    auto p2 = write_file("junk2.csv", junk);
    SensorCsvReader r(p1);
    SensorRow row;
    while (r.next(row)) REQUIRE(std::isfinite(row.time));
    EthPblReader e(p2);
    EthRecord rec;
    while (e.next(rec)) {
    }
    fs::remove(p1);
    fs::remove(p2);
  }
  SUCCEED();
}

TEST_CASE("ETH-PBL lines: IMU words, NAV-PVT messages and events decode to the expected values", "[railway][readers][eth]") {
  auto pvt = encode_nav_pvt(sample_pvt());
  auto bad_sum = pvt;
  bad_sum.back() ^= 0xff;
  std::string content =
      "00:00:43.463562,I," + imu_hex(263, -387, -164, -725, -300, 16549) + "\n" +
      "00:00:43.280187,U," + hex(pvt) + "\n" +
      "00:00:43.500000,ARR,Formigine\n" +
      "00:00:43.600000,U," + hex(bad_sum) + "\n" +            // checksum mismatch
      "00:00:43.700000,X,0102\n" +                             // unknown type
      "00:00:43.800000,I,0701\n" +                             // truncated IMU record
      "0:0:43.8,I," + imu_hex(0, 0, 0, 0, 0, 0) + "\n" +      // bad timestamp
      "1:00:00.000000,I," + imu_hex(1, 2, 3, 4, 5, 6) + "\n";
  auto p = write_file("eth.csv", content);
  EthPblReader r(p);
  std::vector<EthRecord> recs;
  EthRecord rec;
  while (r.next(rec)) recs.push_back(rec);
  REQUIRE(recs.size() == 4);

  auto& imu = std::get<EthImu>(recs[0]);
  CHECK(imu.t == Approx(43.463562));
  CHECK(imu.gyro[0] == Approx(263 * 4.37e-3 * M_PI / 180));
  CHECK(imu.gyro[1] == Approx(-387 * 4.37e-3 * M_PI / 180));
  CHECK(imu.acc[2] == Approx(16549 * 0.061e-3 * 9.80665));  // about 1 g
  CHECK(imu.acc[2] == Approx(9.9).epsilon(0.01));

  auto& g = std::get<EthPvt>(recs[1]);
  CHECK(g.year == 2022);
  CHECK(g.month == 10);
  CHECK(g.day == 19);
  CHECK(g.lat_deg == Approx(44.6550620).margin(1e-7));
  CHECK(g.lon_deg == Approx(10.9295529).margin(1e-7));
  CHECK(g.num_sv == 20);
  CHECK(g.carr_soln == 2);
  CHECK(g.fix_ok);
  CHECK(g.hacc_m == Approx(0.014));
  CHECK(g.ground_speed == Approx(12.833));
  CHECK(g.heading_deg == Approx(344.12345));
  CHECK(g.utc_seconds_of_day() == Approx(9 * 3600 + 35 * 60 + 31 - 68911e-9));

  auto& ev = std::get<EthEvent>(recs[2]);
  CHECK(ev.type == "ARR");
  CHECK(ev.text == "Formigine");
  CHECK(std::get<EthImu>(recs[3]).t == Approx(3600));

  auto& s = r.summary();
  CHECK(s.dropped.at("bad_checksum") == 1);
  CHECK(s.dropped.at("unknown_type") == 1);
  CHECK(s.dropped.at("malformed") == 2);
  CHECK_THAT(s.to_string(), Catch::Contains(p + ":4: UBX checksum mismatch"));

  ReadPolicy strict;
  strict.bad_checksum = OnBad::kStop;
  EthPblReader r2(p, strict);
  CHECK_THROWS_WITH([&] { while (r2.next(rec)) {} }(), Catch::Contains(":4: UBX checksum"));
  fs::remove(p);
}

TEST_CASE("board timestamps", "[railway][readers][eth]") {
  CHECK(*parse_board_time("00:00:43.463562") == Approx(43.463562));
  CHECK(*parse_board_time("12:01:02.5") == Approx(12 * 3600 + 62.5));
  CHECK_FALSE(parse_board_time("00:61:00.0"));
  CHECK_FALSE(parse_board_time("garbage"));
  CHECK_FALSE(parse_board_time("1:2:3"));
}
