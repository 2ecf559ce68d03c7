#include "yard/railway/readers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>

namespace yard::railway {

uint64_t ReadSummary::dropped_total() const {
  uint64_t n = 0;
  for (auto& [k, v] : dropped) n += v;
  return n;
}

std::string ReadSummary::to_string() const {
  std::ostringstream o;
  o << lines << " lines, " << records << " records";
  if (reordered) o << ", " << reordered << " put back in time order";
  for (auto& [k, v] : dropped) o << ", " << v << " dropped (" << k << ")";
  for (auto& e : examples) o << "\n  " << e.file << ":" << e.line << ": " << e.reason;
  return o.str();
}

void report_problem(ReadSummary& summary, const ReadPolicy& policy, const std::string& file, uint64_t line,
                    const std::string& kind, OnBad how, const std::string& reason) {
  if (how == OnBad::kStop) throw ReadError(file, line, reason);
  ++summary.dropped[kind];
  if (summary.examples.size() < policy.keep_examples) summary.examples.push_back({file, line, reason});
}

namespace {

// Splits on commas without allocating per field.
size_t split(const std::string& line, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      out.emplace_back(line.data() + start, i - start);
      start = i + 1;
    }
  }
  return out.size();
}

// A number, or nullopt; "nan"/"inf" parse (and are caught as non-finite by the caller).
std::optional<double> number(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  double v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool unhex(std::string_view s, std::vector<uint8_t>& out) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  if (s.size() % 2) return false;
  out.resize(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <class T>
T le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86 and ARM are little-endian, as UBX and the IMU words are
  return v;
}

template <class T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

constexpr double kG = 9.80665;

}  // namespace

// ---- SensorCsvReader -------------------------------------------------------------------------

SensorCsvReader::SensorCsvReader(const std::string& path, ReadPolicy policy)
    : path_(path), policy_(policy), in_(path) {
  if (!in_) throw ReadError(path, 0, "cannot open");
  std::string header;
  if (!std::getline(in_, header)) throw ReadError(path, 1, "empty file: no header");
  line_no_ = 1;
  ++summary_.lines;
  std::vector<std::string_view> f;
  split(header, f);
  for (auto v : f) {
    std::string c(v);
    if (!c.empty() && c.back() == '\r') c.pop_back();
    columns_.push_back(c);
  }
  if (columns_.empty() || columns_[0] != "local_time")
    throw ReadError(path, 1, "the header must start with local_time, found '" + header.substr(0, 40) + "'");
  for (size_t i = 1; i < columns_.size(); ++i)
    if (columns_[i].size() > 3 && columns_[i].compare(columns_[i].size() - 3, 3, "_id") == 0) text_column_ = static_cast<int>(i);
}

void SensorCsvReader::problem(const std::string& kind, OnBad how, const std::string& reason) {
  report_problem(summary_, policy_, path_, line_no_, kind, how, reason);
}

bool SensorCsvReader::read_one(SensorRow& row) {
  std::string line;
  std::vector<std::string_view> f;
  while (std::getline(in_, line)) {
    ++line_no_;
    ++summary_.lines;
    if (line.empty() || line == "\r") continue;
    if (split(line, f) != columns_.size()) {
      problem("malformed", policy_.malformed,
              "expected " + std::to_string(columns_.size()) + " columns, found " + std::to_string(f.size()));
      continue;
    }
    row.values.clear();
    row.text.clear();
    row.line = line_no_;
    bool ok = true, finite = true;
    for (size_t i = 0; i < f.size() && ok; ++i) {
      if (static_cast<int>(i) == text_column_) {
        row.text.assign(f[i]);
        if (!row.text.empty() && row.text.back() == '\r') row.text.pop_back();
        continue;
      }
      auto v = number(f[i]);
      if (!v) {
        ok = false;
        problem("malformed", policy_.malformed, "column " + columns_[i] + " is not a number: '" + std::string(f[i].substr(0, 32)) + "'");
        break;
      }
      if (!std::isfinite(*v)) finite = false;
      if (i == 0) row.time = *v;
      else row.values.push_back(*v);
    }
    if (!ok) continue;
    if (!finite) {
      problem("non_finite", policy_.non_finite, "NaN or infinite value");
      continue;
    }
    return true;
  }
  return false;
}

bool SensorCsvReader::next(SensorRow& row) {
  if (policy_.non_monotonic != OnBad::kReorder) {
    while (read_one(row)) {
      if (row.time < last_out_) {
        problem("non_monotonic", policy_.non_monotonic,
                "time goes backwards (" + std::to_string(row.time) + " after " + std::to_string(last_out_) + ")");
        continue;
      }
      last_out_ = row.time;
      ++summary_.records;
      return true;
    }
    return false;
  }
  // Reorder window: keep it full, release the earliest.
  while (!eof_ && window_.size() < std::max<size_t>(1, policy_.reorder_window)) {
    SensorRow r;
    if (!read_one(r)) {
      eof_ = true;
      break;
    }
    if (r.time < last_out_) {
      problem("non_monotonic", OnBad::kDrop,
              "time goes backwards beyond the reorder window (" + std::to_string(r.time) + ")");
      continue;
    }
    auto pos = std::upper_bound(window_.begin(), window_.end(), r.time,
                                [](double t, const SensorRow& x) { return t < x.time; });
    if (pos != window_.end()) ++summary_.reordered;
    window_.insert(pos, std::move(r));
  }
  if (window_.empty()) return false;
  row = std::move(window_.front());
  window_.pop_front();
  last_out_ = row.time;
  ++summary_.records;
  return true;
}

// ---- ETH-PBL --------------------------------------------------------------------------------

std::optional<double> parse_board_time(const std::string& s) {
  // [h]:mm:ss.ffffff
  auto c1 = s.find(':');
  auto c2 = c1 == std::string::npos ? c1 : s.find(':', c1 + 1);
  if (c1 == std::string::npos || c2 == std::string::npos || c2 - c1 != 3) return std::nullopt;
  auto h = number(std::string_view(s).substr(0, c1));
  auto m = number(std::string_view(s).substr(c1 + 1, 2));
  auto sec = number(std::string_view(s).substr(c2 + 1));
  if (!h || !m || !sec || *h < 0 || *m < 0 || *m >= 60 || *sec < 0 || *sec >= 60 || *h != std::floor(*h)) return std::nullopt;
  if (s.size() - c2 - 1 < 2) return std::nullopt;
  return *h * 3600 + *m * 60 + *sec;
}

std::pair<uint8_t, uint8_t> ubx_checksum(const uint8_t* data, size_t n) {
  uint8_t a = 0, b = 0;
  for (size_t i = 0; i < n; ++i) {
    a = static_cast<uint8_t>(a + data[i]);
    b = static_cast<uint8_t>(b + a);
  }
  return {a, b};
}

double EthPvt::utc_seconds_of_day() const { return hour * 3600.0 + minute * 60.0 + second + nano * 1e-9; }

std::vector<uint8_t> encode_nav_pvt(const EthPvt& p) {
  std::vector<uint8_t> m(6 + 92 + 2, 0);
  m[0] = 0xb5, m[1] = 0x62, m[2] = 0x01, m[3] = 0x07;
  put<uint16_t>(m, 4, 92);
  uint8_t* pl = m.data() + 6;
  auto at = [&](size_t off) { return off + 6; };
  put<uint32_t>(m, at(0), p.itow_ms);
  put<uint16_t>(m, at(4), p.year);
  pl[6] = p.month, pl[7] = p.day, pl[8] = p.hour, pl[9] = p.minute, pl[10] = p.second;
  pl[11] = static_cast<uint8_t>((p.valid_date ? 1 : 0) | (p.valid_time ? 2 : 0));
  put<int32_t>(m, at(16), p.nano);
  pl[20] = p.fix_type;
  pl[21] = static_cast<uint8_t>((p.fix_ok ? 1 : 0) | (p.carr_soln << 6));
  pl[23] = p.num_sv;
  put<int32_t>(m, at(24), static_cast<int32_t>(std::lround(p.lon_deg * 1e7)));
  put<int32_t>(m, at(28), static_cast<int32_t>(std::lround(p.lat_deg * 1e7)));
  put<int32_t>(m, at(32), static_cast<int32_t>(std::lround(p.height_m * 1000)));
  put<int32_t>(m, at(36), static_cast<int32_t>(std::lround(p.hmsl_m * 1000)));
  put<uint32_t>(m, at(40), static_cast<uint32_t>(std::lround(p.hacc_m * 1000)));
  put<uint32_t>(m, at(44), static_cast<uint32_t>(std::lround(p.vacc_m * 1000)));
  put<int32_t>(m, at(48), static_cast<int32_t>(std::lround(p.vel_n * 1000)));
  put<int32_t>(m, at(52), static_cast<int32_t>(std::lround(p.vel_e * 1000)));
  put<int32_t>(m, at(56), static_cast<int32_t>(std::lround(p.vel_d * 1000)));
  put<int32_t>(m, at(60), static_cast<int32_t>(std::lround(p.ground_speed * 1000)));
  put<int32_t>(m, at(64), static_cast<int32_t>(std::lround(p.heading_deg * 1e5)));
  put<uint32_t>(m, at(68), static_cast<uint32_t>(std::lround(p.speed_acc * 1000)));
  put<uint16_t>(m, at(78), static_cast<uint16_t>(p.invalid_llh ? 1 : 0));
  auto [a, b] = ubx_checksum(m.data() + 2, 4 + 92);
  m[98] = a, m[99] = b;
  return m;
}

EthPblReader::EthPblReader(const std::string& path, ReadPolicy policy) : path_(path), policy_(policy), in_(path) {
  if (!in_) throw ReadError(path, 0, "cannot open");
}

void EthPblReader::problem(const std::string& kind, OnBad how, const std::string& reason) {
  report_problem(summary_, policy_, path_, line_no_, kind, how, reason);
}

namespace {

// A UBX NAV-PVT payload (92 bytes) received at board time t.
EthPvt decode_nav_pvt(const uint8_t* p, double t) {
  EthPvt v{};
  v.t = t;
  v.itow_ms = le<uint32_t>(p);
  v.year = le<uint16_t>(p + 4);
  v.month = p[6], v.day = p[7], v.hour = p[8], v.minute = p[9], v.second = p[10];
  v.valid_date = p[11] & 1;
  v.valid_time = p[11] & 2;
  v.nano = le<int32_t>(p + 16);
  v.fix_type = p[20];
  v.fix_ok = p[21] & 1;
  v.carr_soln = static_cast<uint8_t>(p[21] >> 6);
  v.num_sv = p[23];
  v.lon_deg = le<int32_t>(p + 24) * 1e-7;
  v.lat_deg = le<int32_t>(p + 28) * 1e-7;
  v.height_m = le<int32_t>(p + 32) / 1000.0;
  v.hmsl_m = le<int32_t>(p + 36) / 1000.0;
  v.hacc_m = le<uint32_t>(p + 40) / 1000.0;
  v.vacc_m = le<uint32_t>(p + 44) / 1000.0;
  v.vel_n = le<int32_t>(p + 48) / 1000.0;
  v.vel_e = le<int32_t>(p + 52) / 1000.0;
  v.vel_d = le<int32_t>(p + 56) / 1000.0;
  v.ground_speed = le<int32_t>(p + 60) / 1000.0;
  v.heading_deg = le<int32_t>(p + 64) * 1e-5;
  v.speed_acc = le<uint32_t>(p + 68) / 1000.0;
  v.invalid_llh = le<uint16_t>(p + 78) & 1;
  return v;
}

}  // namespace

bool EthPblReader::parse(const std::string& line, EthRecord& rec) {
  auto c1 = line.find(',');
  auto c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
  if (c2 == std::string::npos) {
    problem("malformed", policy_.malformed, "expected time,TYPE,DATA");
    return false;
  }
  auto t = parse_board_time(line.substr(0, c1));
  if (!t) {
    problem("malformed", policy_.malformed, "bad timestamp '" + line.substr(0, std::min<size_t>(c1, 24)) + "'");
    return false;
  }
  std::string type = line.substr(c1 + 1, c2 - c1 - 1);
  std::string_view data(line.data() + c2 + 1, line.size() - c2 - 1);
  if (type == "I") return parse_imu(data, *t, rec);
  if (type == "U") return parse_ubx(data, *t, rec);
  if (type == "BRK" || type == "ARR" || type == "DEP") {
    std::string text(data);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    rec = EthEvent{*t, type, text};
    return true;
  }
  problem("unknown_type", policy_.unknown_type, "unknown record type '" + type.substr(0, 16) + "'");
  return false;
}

bool EthPblReader::parse_imu(std::string_view data, double t, EthRecord& rec) {
  std::vector<uint8_t> bytes;
  if (!unhex(data, bytes) || bytes.size() != 12) {
    problem("malformed", policy_.malformed, "IMU record is not 12 bytes of hex");
    return false;
  }
  EthImu imu{t, {}, {}};
  const double gyro_lsb = 4.37e-3 * M_PI / 180, acc_lsb = 0.061e-3 * kG;
  for (int i = 0; i < 3; ++i) {
    imu.gyro[i] = le<int16_t>(bytes.data() + 2 * i) * gyro_lsb;
    imu.acc[i] = le<int16_t>(bytes.data() + 6 + 2 * i) * acc_lsb;
  }
  rec = imu;
  return true;
}

bool EthPblReader::parse_ubx(std::string_view data, double t, EthRecord& rec) {
  std::vector<uint8_t> bytes;
  if (!unhex(data, bytes) || bytes.size() < 8) {
    problem("malformed", policy_.malformed, "UBX record is not hex of at least 8 bytes");
    return false;
  }
  if (bytes[0] != 0xb5 || bytes[1] != 0x62) {
    problem("malformed", policy_.malformed, "UBX record without the b5 62 sync bytes");
    return false;
  }
  uint16_t len = le<uint16_t>(bytes.data() + 4);
  if (bytes.size() != size_t(len) + 8) {
    problem("malformed", policy_.malformed,
            "UBX length " + std::to_string(len) + " does not match the " + std::to_string(bytes.size()) + " bytes given");
    return false;
  }
  auto [a, b] = ubx_checksum(bytes.data() + 2, 4 + len);
  if (a != bytes[6 + len] || b != bytes[7 + len]) {
    problem("bad_checksum", policy_.bad_checksum, "UBX checksum mismatch");
    return false;
  }
  uint8_t cls = bytes[2], id = bytes[3];
  if (cls == 0x01 && id == 0x07 && len == 92) {
    EthPvt v = decode_nav_pvt(bytes.data() + 6, t);
    if (std::abs(v.lat_deg) > 90 || std::abs(v.lon_deg) > 180) {
      problem("malformed", policy_.malformed, "NAV-PVT position out of range");
      return false;
    }
    rec = v;
    return true;
  }
  if (cls == 0x01 && id == 0x36) {
    ++summary_.dropped["ignored (NAV-COV)"];
    return false;
  }
  problem("unknown_type", policy_.unknown_type,
          "UBX class 0x" + std::to_string(cls) + " id 0x" + std::to_string(id) + " is not decoded");
  return false;
}

bool EthPblReader::next(EthRecord& rec) {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_no_;
    ++summary_.lines;
    if (line.empty() || line == "\r") continue;
    if (!parse(line, rec)) continue;
    double t = std::visit([](auto& r) { return r.t; }, rec);
    // The IMU and GNSS lines come from different buffers and interleave a little; only a jump
    // back of more than a second is a broken clock.
    if (t < last_t_ - 1.0) {
      problem("non_monotonic", policy_.non_monotonic == OnBad::kReorder ? OnBad::kDrop : policy_.non_monotonic,
              "board time jumps back from " + std::to_string(last_t_) + " to " + std::to_string(t));
      continue;
    }
    last_t_ = std::max(last_t_, t);
    ++summary_.records;
    return true;
  }
  return false;
}

}  // namespace yard::railway
