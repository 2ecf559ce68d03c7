// Streaming readers for raw railway logs, with bounded memory (multi-GB files are fine).
//
// Bad input policy, per kind of problem (ReadPolicy), each either drops the record and counts it
// or stops with a ReadError naming file:line and the reason:
//   malformed        a line that does not parse (columns, numbers, hex, timestamp)   default: drop
//   non_finite       NaN or infinite values                                          default: drop
//   non_monotonic    time going backwards                                            default: reorder
//                    (reorder: a window of the last `reorder_window` records is kept sorted; a
//                    record older than what already left the window is dropped and counted)
//   unknown_type     a record type the reader does not know                          default: drop
//   bad_checksum     a UBX message whose checksum does not match                     default: drop
// summary() tells how many lines were read, how many records came out, what was dropped and
// why, and the first few problems with their file:line.
#pragma once

#include <cstdint>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace yard::railway {

enum class OnBad { kDrop, kStop, kReorder };

struct ReadPolicy {
  OnBad malformed = OnBad::kDrop;
  OnBad non_finite = OnBad::kDrop;
  OnBad non_monotonic = OnBad::kReorder;
  OnBad unknown_type = OnBad::kDrop;
  OnBad bad_checksum = OnBad::kDrop;
  size_t reorder_window = 64;
  size_t keep_examples = 10;
};

struct ReadProblem {
  std::string file;
  uint64_t line;
  std::string reason;
};

struct ReadSummary {
  uint64_t lines = 0;
  uint64_t records = 0;
  uint64_t reordered = 0;
  std::map<std::string, uint64_t> dropped;  // by kind: malformed, non_finite, ...
  std::vector<ReadProblem> examples;
  uint64_t dropped_total() const;
  std::string to_string() const;
};

class ReadError : public std::runtime_error {
 public:
  ReadError(const std::string& file, uint64_t line, const std::string& reason)
      : std::runtime_error(file + ":" + std::to_string(line) + ": " + reason), file_(file), line_(line), reason_(reason) {}
  const std::string& file() const { return file_; }
  uint64_t line() const { return line_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_;
  uint64_t line_;
  std::string reason_;
};

// A bad record under the policy `how`: throws ReadError (kStop), or counts it under `kind` in the
// summary, keeping the first few as examples. Every reader reports its problems through this.
void report_problem(ReadSummary& summary, const ReadPolicy& policy, const std::string& file, uint64_t line,
                    const std::string& kind, OnBad how, const std::string& reason);

// ---- the simulator's format: one CSV per sensor, local timestamp first -------------------------

struct SensorRow {
  double time = 0;                 // the logger's local timestamp
  std::vector<double> values;      // the numeric columns after the time, in header order
  std::string text;                // the text column, if the file has one (e.g. balise_id)
  uint64_t line = 0;
};

class SensorCsvReader {
 public:
  // Throws ReadError when the file cannot be opened or has no header.
  explicit SensorCsvReader(const std::string& path, ReadPolicy policy = {});
  // The next record in time order (per the policy); false at the end.
  bool next(SensorRow& row);
  const std::vector<std::string>& columns() const { return columns_; }
  const ReadSummary& summary() const { return summary_; }

 private:
  bool read_one(SensorRow& row);
  void problem(const std::string& kind, OnBad how, const std::string& reason);

  std::string path_;
  ReadPolicy policy_;
  std::ifstream in_;
  std::vector<std::string> columns_;
  int text_column_ = -1;
  uint64_t line_no_ = 0;
  std::deque<SensorRow> window_;  // sorted by time
  double last_out_ = -1e300;
  bool eof_ = false;
  ReadSummary summary_;
};

// ---- the ETH-PBL Railway-Precise-Localization format -------------------------------------------
// Lines "h:mm:ss.ffffff,TYPE,DATA". TYPE I: 12 bytes of hex, gyro x/y/z then accelerometer x/y/z,
// each a little-endian int16 (±125 dps: 4.37 mdps/LSB; ±2 g: 0.061 mg/LSB). TYPE U: a UBX message
// in hex (NAV-PVT decoded; NAV-COV recognised and skipped). BRK, ARR, DEP: events with text.

struct EthImu {
  double t;          // board clock, s since start
  double gyro[3];    // rad/s
  double acc[3];     // m/s^2
};

struct EthPvt {
  double t;                  // board clock at arrival
  uint32_t itow_ms;
  uint16_t year;
  uint8_t month, day, hour, minute, second;
  bool valid_date, valid_time;
  int32_t nano;
  uint8_t fix_type;
  bool fix_ok;
  uint8_t carr_soln;         // 0 none, 1 RTK float, 2 RTK fixed
  uint8_t num_sv;
  double lon_deg, lat_deg;
  double height_m, hmsl_m, hacc_m, vacc_m;
  double vel_n, vel_e, vel_d, ground_speed;  // m/s
  double heading_deg;
  double speed_acc;          // m/s
  bool invalid_llh;
  // GNSS time of the solution: seconds into the day (UTC) with the nano correction.
  double utc_seconds_of_day() const;
};

struct EthEvent {
  double t;
  std::string type;  // BRK, ARR, DEP
  std::string text;
};

using EthRecord = std::variant<EthImu, EthPvt, EthEvent>;

class EthPblReader {
 public:
  explicit EthPblReader(const std::string& path, ReadPolicy policy = {});
  bool next(EthRecord& rec);
  const ReadSummary& summary() const { return summary_; }

 private:
  bool parse(const std::string& line, EthRecord& rec);
  // A record's hex data at board time t: an IMU sample, a UBX message (NAV-PVT decoded).
  bool parse_imu(std::string_view data, double t, EthRecord& rec);
  bool parse_ubx(std::string_view data, double t, EthRecord& rec);
  void problem(const std::string& kind, OnBad how, const std::string& reason);

  std::string path_;
  ReadPolicy policy_;
  std::ifstream in_;
  uint64_t line_no_ = 0;
  double last_t_ = -1e300;
  ReadSummary summary_;
};

// UBX helpers (public for tests and tools): the 8-bit Fletcher checksum over class, id, length and
// payload; and a NAV-PVT encoder (what a simulator or a test writes).
std::pair<uint8_t, uint8_t> ubx_checksum(const uint8_t* data, size_t n);
std::vector<uint8_t> encode_nav_pvt(const EthPvt& p);
// "h:mm:ss.ffffff" -> seconds; nullopt when malformed.
std::optional<double> parse_board_time(const std::string& s);

}  // namespace yard::railway
