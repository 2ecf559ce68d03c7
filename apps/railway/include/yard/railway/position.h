// Along-track position: a Kalman filter on [chainage, speed, odometer scale] in GNSS time.
//
// Inputs (all put on the reference timebase first): the IMU's longitudinal acceleration drives the
// prediction (less the gradient's share of gravity); the odometer's speed updates speed and scale,
// unless its innovation says the wheel slips or slides (then it is skipped and the interval
// flagged); GNSS fixes, projected onto the track polyline, update chainage and speed (fixes far
// off the track or far from the prediction are multipath and rejected); balise detections are
// near-exact chainage fixes. The odometer has no PPS: its clock is found by cross-correlating its
// speed with GNSS speed over sliding windows, then fitted like the others.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "yard/railway/align.h"
#include "yard/railway/clock_fit.h"
#include "yard/railway/nmea.h"

namespace yard::railway {

// The line as the railway knows it (line.json).
struct TrackGeometry {
  std::vector<double> chainage, x, y;  // polyline
  std::vector<std::pair<std::string, double>> balises;
  std::vector<std::pair<double, std::pair<double, double>>> gradients;  // start, (permille, unused)
  std::vector<double> km_posts;                                         // chainage of each
  std::optional<PlaneOrigin> origin;                // WGS84 of the plane's (0, 0)
  double gradient(double s) const;
  // The point of the polyline at chainage s (clamped to its ends).
  std::pair<double, double> point_at(double s) const;
  // Chainage of the point of the polyline nearest (x, y), searched within ±window of hint (the
  // whole line when hint < 0); lateral distance in `lateral`.
  double project(double x, double y, double hint, double window, double* lateral) const;
  static TrackGeometry load(const std::string& line_json);
};

struct PositionTrack {
  std::vector<double> t, s, v, k;                  // filter output at every odometer sample
  std::vector<std::pair<double, double>> slips;    // flagged intervals (reference time)
  ClockFit odometer_clock;
  uint64_t gnss_used = 0, gnss_rejected = 0, balises_used = 0;
};

// Runs alignment and the filter over a simulator-layout log directory.
PositionTrack estimate_position(const std::string& dir);
// The same with the clock fits already made (align_clocks).
PositionTrack estimate_position(const std::string& dir, const std::map<std::string, ClockReport>& clocks);

struct PositionReport {
  double chainage_rms_m = 0, chainage_max_m = 0;
  double outage_max_m = 0;          // worst error inside GNSS outages of 30 s or more
  double slip_recall = 0;           // true slip/slide episodes overlapped by a flagged interval
  double slip_precision = 0;        // flagged intervals that overlap a true episode
  double odometer_time_error_rms_us = 0;
  // The error (estimate - truth) at every estimate, for plots.
  std::vector<double> t, chainage, error_m;
};

// Compares with truth.csv / truth.json in dir.
PositionReport evaluate_position(const std::string& dir, const PositionTrack& track);

}  // namespace yard::railway
