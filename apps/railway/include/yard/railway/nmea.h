// NMEA 0183 as a logger captures it from a GNSS receiver's serial port: one sentence per line,
// each preceded by the logger's own receive timestamp ("<local seconds> $GPGGA,...*hh").
//
// The receiver sends a burst every second, some 10-700 ms after the PPS edge of that second:
// GGA (fix, position, satellites), RMC (fix status, position, speed, date) and ZDA (date and
// time). The UTC time in each sentence is the time of the edge that began the second. A logger
// that has no GNSS of its own receives the same serial stream (its ZDA sentences) beside the
// PPS line, which is how it learns which second each edge belongs to.
//
// Reference time everywhere in the railway app is UTC seconds since 00:00 of the log's first
// day (the date of the first dated sentence).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "yard/railway/readers.h"

namespace yard::railway {

// A local plane about an origin (WGS84 degrees): x east, y north, metres. Equirectangular: exact
// both ways, and within centimetres of the ellipsoid over a line of tens of kilometres.
struct PlaneOrigin {
  double lat = 0, lon = 0;
};
std::pair<double, double> plane_to_wgs84(const PlaneOrigin& o, double x, double y);  // (lat, lon)
std::pair<double, double> wgs84_to_plane(const PlaneOrigin& o, double lat, double lon);  // (x, y)

// ---- writing (the simulator, tests) ------------------------------------------------------------

struct UtcDate {
  int year = 2026, month = 3, day = 14;
};
// "$" body "*" checksum: the XOR of the body's bytes, two hex digits.
std::string nmea_sentence(const std::string& body);
// Bodies for a second `seconds_of_day` (may exceed 86400: the date moves on).
std::string nmea_gga(UtcDate date, double seconds_of_day, std::optional<std::pair<double, double>> lat_lon, int sats,
                     double hdop);
std::string nmea_rmc(UtcDate date, double seconds_of_day, std::optional<std::pair<double, double>> lat_lon,
                     double speed_mps, double course_deg);
std::string nmea_zda(UtcDate date, double seconds_of_day);

// ---- reading -----------------------------------------------------------------------------------

enum class NmeaKind : uint8_t { kGga, kRmc, kZda };

struct NmeaRecord {
  double local = 0;        // the logger's receive timestamp
  NmeaKind kind = NmeaKind::kZda;
  double utc = 0;          // reference time the sentence names (see above)
  bool fix = false;        // GGA quality > 0, RMC status A (ZDA: false)
  double lat = 0, lon = 0; // degrees, when fix
  int sats = 0;            // GGA
  double speed_mps = 0;    // RMC
  uint64_t line = 0;
};

// Streams a capture. Bad input per ReadPolicy: a checksum that does not match (bad_checksum), a
// line or sentence that does not parse (malformed), a talker/sentence the reader does not use
// (unknown_type: GSV, GSA, ...), a GGA before any dated sentence (malformed: its day is unknown).
class NmeaReader {
 public:
  explicit NmeaReader(const std::string& path, ReadPolicy policy = {});
  bool next(NmeaRecord& rec);
  const ReadSummary& summary() const { return summary_; }

 private:
  bool parse(const std::string& line, NmeaRecord& rec);
  // The sentence between '$' and its checksum, checked; nullopt (reported) when it is not one.
  std::optional<std::string_view> checked_sentence(std::string_view s);
  // Each type's fields into `rec` (f[0] is the address); what is wrong, or nullopt.
  using Fields = std::vector<std::string_view>;
  std::optional<std::string> parse_zda(const Fields& f, NmeaRecord& rec);
  std::optional<std::string> parse_rmc(const Fields& f, NmeaRecord& rec);
  std::optional<std::string> parse_gga(const Fields& f, NmeaRecord& rec);
  // The date of a dated sentence (RMC, ZDA): the day its times count from.
  void set_day(int y, int m, int d);
  void problem(const std::string& kind, OnBad how, const std::string& reason);

  std::string path_;
  ReadPolicy policy_;
  std::ifstream in_;
  uint64_t line_no_ = 0;
  std::optional<long> first_day_;   // days since 1970 of the first dated sentence
  long day_ = 0;                    // the current day, relative to first_day_
  double last_tod_ = -1;            // time of day of the last sentence, for GGA day rollover
  ReadSummary summary_;
};

// The GNSS logger's fixes, on the reference timebase: one per second that has both a GGA with a
// fix and an RMC with status A (speed from RMC). Read from gnss.nmea projected about `origin`,
// or from gnss.csv (local_time,gps_time,x_m,y_m,speed_mps,sats: fixes already decoded).
struct GnssFix {
  double utc, x, y, speed_mps;
  int sats;
};
struct GnssFixes {
  std::vector<GnssFix> fixes;
  ReadSummary read;
  std::string source;  // the file read
};
// Throws std::runtime_error when the directory has neither file, or gnss.nmea without an origin.
GnssFixes read_gnss_fixes(const std::string& dir, std::optional<PlaneOrigin> origin, const ReadPolicy& policy = {});

}  // namespace yard::railway
