// Clock alignment: a sensor clock against the GNSS time reference.
//
// Input: (local, reference) pairs — PPS edges as the sensor's logger timestamped them. Model:
// local = offset_k + (1 + drift) * reference inside segment k, where segments are separated by
// clock steps (NTP corrections) and the drift is common to all segments.
//
// The fit survives what real loggers do:
//  * outliers: an edge counted in the wrong second shows as a +-1 s spike that the next pair
//    undoes; such points are removed;
//  * steps: a level change in local - reference beyond the jitter, kept across the following
//    pairs, starts a new segment;
//  * jitter: the drift and the offsets are least-squares over all remaining pairs, with two
//    passes of 4-sigma rejection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::railway {

struct ClockSegment {
  double ref_start;   // reference time where the segment begins (first pair in it)
  double ref_end;     // ... and ends (last pair in it)
  double offset_s;    // local at reference 0, for this segment
};

struct ClockFit {
  double drift_ppm = 0;
  std::vector<ClockSegment> segments;
  double sigma_s = 0;       // residual standard deviation
  uint64_t pairs_used = 0;
  uint64_t outliers = 0;
  // Reference time of a local timestamp in segment k.
  double to_reference(double local, size_t segment) const;
  // The segment whose reference span contains ref (the nearest one outside all spans).
  size_t segment_at_reference(double ref) const;
  // Local time at a reference time (inverse of to_reference).
  double to_local(double ref) const;
};

// ---- from unlabelled PPS edges to (local, reference) pairs --------------------------------------
//
// A logger records PPS edges on its own clock without knowing which second each belongs to, and
// the receiver's time messages (NMEA ZDA/RMC/GGA) beside them: each names the second whose edge
// came before it, and arrives within a second of that edge. Pairing:
//  * edges on the one-second grid are kept: an edge is on it when at least two of its eight
//    nearest neighbours lie a whole number of seconds away (within 5 ms + 0.2% of the distance,
//    room for any drift a logger has); spurious edges (noise on the line) fall between and go;
//    of two kept edges under half a second apart, the one more neighbours agree with stays;
//  * each kept edge takes the first message that arrives after it, if within max_latency_s; a
//    missed edge leaves its message unused (the next edge is more than a second before the
//    following message), a lost message leaves its edge unlabelled.
// What is left over (an edge labelled one second off near a clock step) the fit removes as an
// outlier.
struct TimeMessage {
  double local;  // arrival on the logger's clock
  double utc;    // the second it names (reference time)
};

struct PpsPairing {
  std::vector<std::pair<double, double>> pairs;  // (local, reference)
  uint64_t edges = 0;            // edges given
  uint64_t off_grid = 0;         // not on the one-second grid: spurious
  uint64_t unlabelled = 0;       // on the grid, with no message after them in time
  uint64_t messages = 0;         // distinct seconds named
  uint64_t messages_unused = 0;  // seconds whose edge is missing
};

PpsPairing pair_pps_edges(std::vector<double> edges, std::vector<TimeMessage> messages, double max_latency_s = 0.95);

// Throws std::runtime_error when fewer than 10 usable pairs remain.
ClockFit fit_clock(std::vector<std::pair<double, double>> local_ref_pairs);

// Maps a stream of local timestamps (in file order) to reference time, following the segments:
// it moves to the next segment when the next segment's mapping continues the stream and the
// current one does not (the way to tell which side of a backward clock step a record is on).
class ClockMapper {
 public:
  explicit ClockMapper(const ClockFit& fit) : fit_(fit) {}
  double map(double local);

 private:
  const ClockFit& fit_;
  size_t seg_ = 0;
  double last_ref_ = -1e300;
};

}  // namespace yard::railway
