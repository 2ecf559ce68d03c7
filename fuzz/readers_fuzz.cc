// libFuzzer target: the railway log readers over arbitrary bytes: the sensor CSV reader and the
// NMEA reader. The input's first byte picks the CSV reader's policy (the defaults, stop at every
// problem, or a one-record reorder window keeping no examples); the rest is the file. A reader may refuse its input (a
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
      fuzz::write_seed(dir, name, std::string(1, '\0') + fuzz::head_lines(e.path().string(), 40));
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

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, true); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto& path = fuzz::write_input(data + 1, size - 1);
  ReadPolicy p;
  if (data[0] % 3 == 1) {
    p.malformed = p.non_finite = p.non_monotonic = p.unknown_type = OnBad::kStop;
  } else if (data[0] % 3 == 2) {
    p.reorder_window = 1;
    p.keep_examples = 0;
  }
  read_csv(path, p);
  read_nmea(path);
  return 0;
}
