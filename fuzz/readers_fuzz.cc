// libFuzzer target: the railway log readers over arbitrary bytes: the sensor CSV reader (every
// policy), the NMEA reader and the GNSS fixes built from it. A reader may refuse its input (a
// ReadError or another exception); it must never crash, hang or read out of bounds. Seeds are the
// first lines of each file of a short simulated log (FUZZ_MAKE_SEEDS=DIR).
#include <filesystem>

#include "fuzz_support.h"
#include "yard/railway/nmea.h"
#include "yard/railway/readers.h"
#include "yard/railway/sim.h"

using namespace yard::railway;

namespace {

void make_seeds(const std::string& dir) {
  auto log = std::filesystem::path(dir) / "log";
  auto cfg = default_config(3);
  cfg.length_m = 400;
  cfg.max_duration_s = 30;
  simulate(cfg, log.string());
  for (auto& e : std::filesystem::directory_iterator(log)) {
    auto name = e.path().filename().string();
    if (e.path().extension() == ".csv" || e.path().extension() == ".nmea")
      fuzz::write_seed(dir, name, fuzz::head_lines(e.path().string(), 40));
  }
  std::filesystem::remove_all(log);
}

void read_csv(const std::string& path, const ReadPolicy& p) {
  try {
    SensorCsvReader r(path, p);
    SensorRow row;
    while (r.next(row)) {
    }
    (void)r.summary().to_string();
  } catch (const std::exception&) {
  }
}

void read_nmea(const std::string& path) {
  try {
    NmeaReader r(path);
    NmeaRecord rec;
    while (r.next(rec)) {
    }
    (void)r.summary().to_string();
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (auto dir = fuzz::seed_dir(); !dir.empty()) {
    make_seeds(dir);
    std::exit(0);
  }
  fuzz::remove_input_at_exit();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& path = fuzz::write_input(data, size);
  read_csv(path, ReadPolicy{});
  ReadPolicy strict;
  strict.malformed = strict.non_finite = strict.non_monotonic = strict.unknown_type = OnBad::kStop;
  read_csv(path, strict);
  ReadPolicy tiny;
  tiny.reorder_window = 1;
  tiny.keep_examples = 0;
  read_csv(path, tiny);
  read_nmea(path);
  return 0;
}
