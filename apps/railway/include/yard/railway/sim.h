// The railway simulator: a line, a train running it, and onboard sensors whose clocks and
// positions disagree, with the ground truth written alongside.
//
// Everything is a function of the seed: the same seed and configuration give the same bytes.
// Each part draws from its own stream (derived from the seed and the part's name), so changing
// one sensor's rate does not change what the others produce.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace yard::railway {

// What a simulator of this version records differently from an older one: 3 records PPS edges
// unlabelled (missed and spurious ones among them) with the receiver's NMEA time messages beside
// them, and the GNSS fixes as NMEA (2 wrote each edge with its GPS second, and gnss.csv); 2 labels
// every defect (1 lost those shorter than the truth grid's step) and interpolates the
// irregularity's curvature under the axle box (1 stepped it every grid point, a tone at
// v / 0.25 m).
inline constexpr int kSimulatorVersion = 3;

// Defect classes, the labels of the learning task.
enum class DefectClass : uint8_t { kNone = 0, kSquat = 1, kWeld = 2, kInsulatedJoint = 3, kCorrugation = 4 };
const char* defect_name(DefectClass c);
// Which class a stretch holding several is labelled with: squat > insulated joint > weld >
// corrugation > none (the one a maintenance crew must see first).
int severity_rank(DefectClass c);

struct Curve {
  double start, end;   // chainage, m
  double radius;       // m, signed: positive bends left
  double cant;         // mm
};
struct Zone {
  double start, end;
};
struct SpeedLimit {
  double start, end;
  double v_max;        // m/s
};
struct Station {
  double chainage;
  double dwell_s;
  std::string name;
};
struct Balise {
  std::string id;      // "BG012.1"
  double chainage;
};
struct Defect {
  DefectClass kind;
  double chainage;     // start
  double length;       // m (corrugation patches are long, the others short)
  double severity;     // 0..1
};

// A railway line along chainage 0..length.
struct Line {
  double length = 0;
  std::vector<Curve> curves;
  std::vector<std::pair<double, double>> gradients;  // (start chainage, permille) piecewise
  std::vector<SpeedLimit> limits;
  std::vector<Zone> tunnels, cuttings, degraded;
  std::vector<Station> stations;
  std::vector<Balise> balises;
  std::vector<Defect> defects;
  std::vector<double> km_posts;
  // Vertical track irregularity (mm) every `step` metres, and the polyline (x, y in m) every
  // `step` metres.
  double step = 0.25;
  std::vector<float> irregularity;
  std::vector<float> x, y;

  double curvature(double s) const;  // 1/m, signed
  double cant(double s) const;       // mm
  double gradient(double s) const;   // permille
  double limit(double s) const;      // m/s
  bool in(const std::vector<Zone>& zones, double s) const;
  DefectClass label(double s) const;           // the defect at chainage s
  DefectClass label(double s0, double s1) const;  // the most severe defect touching [s0, s1)
  float irregularity_at(double s) const;
  std::pair<double, double> position(double s) const;
};

// Builds a line of `length_m` from the seed.
Line make_line(uint64_t seed, double length_m);

// A sensor's clock against true (GNSS) time: local = offset + (1 + drift) * t + steps + jitter.
struct ClockModel {
  double offset_s = 0;
  double drift_ppm = 0;
  double jitter_s = 0;
  std::vector<std::pair<double, double>> steps;  // (true time, step in s): NTP corrections
  double local(double t) const;                  // without jitter
};

struct SensorConfig {
  double rate_hz;
  ClockModel clock;
  double dropout_per_hour = 2;    // gaps of 1-20 s with no records
  double out_of_order = 0.0005;   // fraction of adjacent records written swapped
};

struct SimConfig {
  uint64_t seed = 1;
  double length_m = 30000;
  double max_duration_s = 3600;   // the run stops at the end of the line or at this time
  std::map<std::string, SensorConfig> sensors;  // gnss, odometer, imu, axlebox, balise
  std::string bad_logger;          // a sensor whose clock drifts 1600 ppm
};

// The default sensors at field rates, with clocks drawn from the seed (offsets up to seconds,
// drift within ±20 ppm, NTP steps, jitter).
SimConfig default_config(uint64_t seed);

struct SimSummary {
  double duration_s = 0;
  double distance_m = 0;
  std::map<std::string, uint64_t> records;
};

// Runs the train and writes into `dir`: line.json, truth.csv (every 0.25 m: the label of a row is
// the most severe defect touching the cell [s, s + 0.25 m), so a 1 cm joint is labelled too),
// truth.json (clocks, defects, events), one CSV per sensor (local timestamp first), and the time
// sync as the loggers saw it: <logger>_pps.csv (PPS edges on the logger's clock, unlabelled) and
// the GNSS receiver's NMEA stream (gnss.nmea: GGA, RMC, ZDA; <logger>_time.nmea: ZDA). The run
// starts at 00:00:00 UTC (truth.json's utc_start). Throws on I/O errors.
SimSummary simulate(const SimConfig& cfg, const std::string& dir);

}  // namespace yard::railway
