// libFuzzer target: the ETH-PBL log reader (IMU records, UBX messages in hex, events), under the
// policy the input's last byte picks (drop what is bad, or stop). The input is read twice: as a log file as it is, and as the payload of one UBX message made valid around it
// (sync bytes, class and id from its first two bytes, length and checksum), so that the NAV-PVT
// decoding behind the checksum is reached too. Seeds are records the project writes.
#include <cstdio>

#include "fuzz_support.h"
#include "yard/railway/readers.h"

using namespace yard::railway;

namespace {

std::string hex(const std::vector<uint8_t>& b) {
  std::string s;
  char buf[3];
  for (auto c : b) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    s += buf;
  }
  return s;
}

void read_log(const std::string& path, bool stop) {
  ReadPolicy p;
  if (stop) p.malformed = p.non_finite = p.non_monotonic = p.unknown_type = p.bad_checksum = OnBad::kStop;
  try {
    EthPblReader r(path, p);
    EthRecord rec;
    while (r.next(rec))
      if (auto* pvt = std::get_if<EthPvt>(&rec)) (void)pvt->utc_seconds_of_day();
    (void)r.summary().to_string();
  } catch (const std::exception&) {
  }
}

EthPvt sample_pvt() {
  EthPvt p{};
  p.t = 1.5;
  p.itow_ms = 345600000;
  p.year = 2024, p.month = 5, p.day = 17, p.hour = 8, p.minute = 30, p.second = 12;
  p.valid_date = p.valid_time = true;
  p.fix_type = 3;
  p.fix_ok = true;
  p.carr_soln = 2;
  p.num_sv = 14;
  p.lon_deg = 8.54, p.lat_deg = 47.37;
  p.height_m = 450, p.hmsl_m = 402, p.hacc_m = 0.02, p.vacc_m = 0.03;
  p.vel_n = 10, p.vel_e = 2, p.ground_speed = 10.2, p.heading_deg = 11;
  return p;
}

}  // namespace

static void make_seeds(const std::string& dir) {
  std::string pvt = "0:00:01.500000,U," + hex(encode_nav_pvt(sample_pvt())) + "\n";
  fuzz::write_seed(dir, "pvt", pvt);
  fuzz::write_seed(dir, "imu", "0:00:01.000000,I,0a00f5ff0100e803feff0000\n0:00:01.010000,I,0b00f4ff0200e903fdff0100\n");
  fuzz::write_seed(dir, "events", "0:00:00.100000,DEP,Zurich HB\n0:00:02.000000,BRK,emergency\n0:12:00.000000,ARR,Oerlikon\n");
  fuzz::write_seed(dir, "mixed", "0:00:01.000000,I,0a00f5ff0100e803feff0000\n" + pvt + "0:00:01.400000,I,zz\n");
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, true); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The last byte picks the policy: drop what is bad, or stop at the first problem.
  bool stop = size > 0 && (data[size - 1] & 1);
  read_log(fuzz::write_input(data, size), stop);
  if (size >= 2 && size <= 1024) {
    std::vector<uint8_t> m{0xb5, 0x62, data[0], data[1], uint8_t((size - 2) & 0xff), uint8_t((size - 2) >> 8)};
    m.insert(m.end(), data + 2, data + size);
    auto [a, b] = ubx_checksum(m.data() + 2, m.size() - 2);
    m.push_back(a);
    m.push_back(b);
    std::string line = "0:00:01.000000,U," + hex(m) + "\n";
    read_log(fuzz::write_input(reinterpret_cast<const uint8_t*>(line.data()), line.size()), stop);
  }
  return 0;
}
