// The alignment pipeline over a log directory (the simulator's layout): per-sensor clock fits
// against the GNSS PPS reference and, where the ground truth is present, their errors.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "yard/railway/clock_fit.h"
#include "yard/railway/readers.h"

namespace yard::railway {

struct ClockReport {
  ClockFit fit;
  ReadSummary read;                   // the PPS edges
  std::optional<PpsPairing> pairing;  // unlabelled edges: how they were paired (pairs dropped)
  ReadSummary messages_read;          // ... and the time messages they were paired with
  // Against truth.json, when present: mapped reference time minus true time over the run (the
  // second around each true step left out).
  std::optional<double> error_rms_s, error_max_s;
  std::optional<double> true_drift_ppm;
  std::vector<double> error_t, error_us;  // the error every 10 s, for plots
};

// Fits every <sensor>_pps.csv in dir: unlabelled edges (a local_time column) are paired with the
// time messages in <sensor>_time.nmea (or <sensor>.nmea, the GNSS logger's whole stream); edges
// already labelled (local_time,gps_time) are taken as they are. Throws ReadError /
// std::runtime_error on unusable input.
// with_truth: compare with truth.json when present (false: never opened, as on a field log).
std::map<std::string, ClockReport> align_clocks(const std::string& dir, const ReadPolicy& policy = {},
                                                bool with_truth = true);

nlohmann::json to_json(const std::map<std::string, ClockReport>& r);
std::string to_table(const std::map<std::string, ClockReport>& r);

}  // namespace yard::railway
