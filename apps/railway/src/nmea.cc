#include "yard/railway/nmea.h"

#include <charconv>
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace yard::railway {

namespace {

constexpr double kEarthRadius = 6371008.8;  // mean radius, m
constexpr double kDeg = 180.0 / M_PI;
constexpr double kKnot = 1852.0 / 3600.0;   // m/s

// Days since 1970-01-01 of a civil date, and back (H. Hinnant's algorithms).
long days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  long era = (y >= 0 ? y : y - 399) / 400;
  long yoe = y - era * 400;
  long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

UtcDate civil_from_days(long z) {
  z += 719468;
  long era = (z >= 0 ? z : z - 146096) / 146097;
  long doe = z - era * 146097;
  long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  long mp = (5 * doy + 2) / 153;
  int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return {static_cast<int>(yoe + era * 400 + (m <= 2)), m, d};
}

// The date and time of day of `seconds_of_day` counted from `date`'s midnight.
std::pair<UtcDate, double> normalise(UtcDate date, double s) {
  long extra = static_cast<long>(std::floor(s / 86400));
  return {civil_from_days(days_from_civil(date.year, date.month, date.day) + extra), s - 86400.0 * extra};
}

std::string hhmmss(double tod) {
  long cs = std::lround(tod * 100);  // hundredths, as receivers print them
  return fmt::format("{:02d}{:02d}{:02d}.{:02d}", cs / 360000, cs / 6000 % 60, cs / 100 % 60, cs % 100);
}

std::string lat_field(double lat) {
  double a = std::abs(lat);
  int d = static_cast<int>(a);
  return fmt::format("{:02d}{:09.6f},{}", d, (a - d) * 60, lat < 0 ? 'S' : 'N');
}

std::string lon_field(double lon) {
  double a = std::abs(lon);
  int d = static_cast<int>(a);
  return fmt::format("{:03d}{:09.6f},{}", d, (a - d) * 60, lon < 0 ? 'W' : 'E');
}

void split_fields(std::string_view s, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ',') {
      out.emplace_back(s.data() + start, i - start);
      start = i + 1;
    }
}

std::optional<double> num(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// hhmmss(.ss) -> seconds of the day.
std::optional<double> time_of_day(std::string_view s) {
  if (s.size() < 6) return std::nullopt;
  auto h = num(s.substr(0, 2)), m = num(s.substr(2, 2)), sec = num(s.substr(4));
  if (!h || !m || !sec || *h > 23 || *m > 59 || *sec >= 61 || *h < 0 || *m < 0 || *sec < 0) return std::nullopt;
  return *h * 3600 + *m * 60 + *sec;
}

// ddmm.mmmm + hemisphere -> degrees.
std::optional<double> angle(std::string_view v, std::string_view hemi, int deg_digits, double limit) {
  if (v.size() < static_cast<size_t>(deg_digits) + 2) return std::nullopt;
  auto d = num(v.substr(0, deg_digits)), m = num(v.substr(deg_digits));
  if (!d || !m || *m >= 60 || *m < 0 || *d < 0) return std::nullopt;
  double a = *d + *m / 60;
  if (a > limit) return std::nullopt;
  if (hemi == "S" || hemi == "W") return -a;
  if (hemi == "N" || hemi == "E") return a;
  return std::nullopt;
}

int hexdigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::pair<double, double> plane_to_wgs84(const PlaneOrigin& o, double x, double y) {
  return {o.lat + y / kEarthRadius * kDeg, o.lon + x / (kEarthRadius * std::cos(o.lat / kDeg)) * kDeg};
}

std::pair<double, double> wgs84_to_plane(const PlaneOrigin& o, double lat, double lon) {
  return {(lon - o.lon) / kDeg * kEarthRadius * std::cos(o.lat / kDeg), (lat - o.lat) / kDeg * kEarthRadius};
}

std::string nmea_sentence(const std::string& body) {
  uint8_t x = 0;
  for (char c : body) x ^= static_cast<uint8_t>(c);
  return fmt::format("${}*{:02X}", body, x);
}

std::string nmea_gga(UtcDate date, double s, std::optional<std::pair<double, double>> ll, int sats, double hdop) {
  auto [d, tod] = normalise(date, s);
  (void)d;
  if (!ll) return fmt::format("GPGGA,{},,,,,0,{:02d},99.9,,M,,M,,", hhmmss(tod), sats);
  return fmt::format("GPGGA,{},{},{},1,{:02d},{:.1f},432.1,M,47.3,M,,", hhmmss(tod), lat_field(ll->first),
                     lon_field(ll->second), sats, hdop);
}

std::string nmea_rmc(UtcDate date, double s, std::optional<std::pair<double, double>> ll, double speed, double course) {
  auto [d, tod] = normalise(date, s);
  std::string ddmmyy = fmt::format("{:02d}{:02d}{:02d}", d.day, d.month, d.year % 100);
  if (!ll) return fmt::format("GPRMC,{},V,,,,,,,{},,,N", hhmmss(tod), ddmmyy);
  return fmt::format("GPRMC,{},A,{},{},{:.3f},{:.1f},{},,,A", hhmmss(tod), lat_field(ll->first), lon_field(ll->second),
                     speed / kKnot, course, ddmmyy);
}

std::string nmea_zda(UtcDate date, double s) {
  auto [d, tod] = normalise(date, s);
  return fmt::format("GPZDA,{},{:02d},{:02d},{:04d},00,00", hhmmss(tod), d.day, d.month, d.year);
}

NmeaReader::NmeaReader(const std::string& path, ReadPolicy policy) : path_(path), policy_(policy), in_(path) {
  if (!in_) throw ReadError(path, 0, "cannot open");
}

void NmeaReader::problem(const std::string& kind, OnBad how, const std::string& reason) {
  report_problem(summary_, policy_, path_, line_no_, kind, how, reason);
}

std::optional<std::string_view> NmeaReader::checked_sentence(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  auto star = s.rfind('*');
  if (star == std::string_view::npos || star + 3 != s.size() || hexdigit(s[star + 1]) < 0 || hexdigit(s[star + 2]) < 0) {
    problem("malformed", policy_.malformed, "sentence without a '*hh' checksum (cut short?)");
    return std::nullopt;
  }
  uint8_t x = 0;
  for (size_t i = 0; i < star; ++i) x ^= static_cast<uint8_t>(s[i]);
  if (x != (hexdigit(s[star + 1]) << 4 | hexdigit(s[star + 2]))) {
    problem("bad_checksum", policy_.bad_checksum, "NMEA checksum mismatch");
    return std::nullopt;
  }
  return s.substr(0, star);
}

bool NmeaReader::parse(const std::string& line, NmeaRecord& rec) {
  auto sp = line.find(' ');
  auto dollar = line.find('$');
  std::optional<double> local = sp == std::string::npos ? std::nullopt : num(std::string_view(line).substr(0, sp));
  if (!local || dollar == std::string::npos || dollar < sp) {
    problem("malformed", policy_.malformed, "expected '<local time> $<sentence>'");
    return false;
  }
  auto sentence = checked_sentence(std::string_view(line).substr(dollar + 1));
  if (!sentence) return false;
  static thread_local Fields f;
  split_fields(*sentence, f);
  if (f[0].size() != 5) {
    problem("malformed", policy_.malformed, "sentence address '" + std::string(f[0].substr(0, 8)) + "' is not 5 letters");
    return false;
  }
  std::string_view type = f[0].substr(2);
  rec = NmeaRecord{};
  rec.local = *local;
  rec.line = line_no_;
  std::optional<std::string> bad;
  if (type == "ZDA") bad = parse_zda(f, rec);
  else if (type == "RMC") bad = parse_rmc(f, rec);
  else if (type == "GGA") bad = parse_gga(f, rec);
  else {
    problem("unknown_type", policy_.unknown_type, "sentence " + std::string(f[0]) + " is not used");
    return false;
  }
  if (bad) problem("malformed", policy_.malformed, fmt::format("{}: {}", type, *bad));
  return !bad;
}

void NmeaReader::set_day(int y, int m, int d) {
  long days = days_from_civil(y, m, d);
  if (!first_day_) first_day_ = days;
  day_ = days - *first_day_;
}

std::optional<std::string> NmeaReader::parse_zda(const Fields& f, NmeaRecord& rec) {
  if (f.size() < 5) return "fewer than 5 fields";
  auto tod = time_of_day(f[1]);
  auto d = num(f[2]), m = num(f[3]), y = num(f[4]);
  if (!tod || !d || !m || !y || *d < 1 || *d > 31 || *m < 1 || *m > 12 || *y < 1980 || *y > 9999) return "bad date or time";
  rec.kind = NmeaKind::kZda;
  set_day(static_cast<int>(*y), static_cast<int>(*m), static_cast<int>(*d));
  rec.utc = day_ * 86400.0 + *tod;
  last_tod_ = *tod;
  return std::nullopt;
}

std::optional<std::string> NmeaReader::parse_rmc(const Fields& f, NmeaRecord& rec) {
  if (f.size() < 10) return "fewer than 10 fields";
  auto tod = time_of_day(f[1]);
  if (!tod || f[9].size() != 6) return "bad date or time";
  auto d = num(f[9].substr(0, 2)), m = num(f[9].substr(2, 2)), y = num(f[9].substr(4, 2));
  if (!d || !m || !y || *d < 1 || *d > 31 || *m < 1 || *m > 12) return "bad date";
  rec.kind = NmeaKind::kRmc;
  set_day(2000 + static_cast<int>(*y), static_cast<int>(*m), static_cast<int>(*d));
  rec.utc = day_ * 86400.0 + *tod;
  last_tod_ = *tod;
  rec.fix = f[2] == "A";
  if (rec.fix) {
    auto lat = angle(f[3], f[4], 2, 90), lon = angle(f[5], f[6], 3, 180);
    auto kn = num(f[7]);
    if (!lat || !lon || !kn || *kn < 0) return "bad position or speed";
    rec.lat = *lat, rec.lon = *lon, rec.speed_mps = *kn * kKnot;
  }
  return std::nullopt;
}

std::optional<std::string> NmeaReader::parse_gga(const Fields& f, NmeaRecord& rec) {
  if (f.size() < 8) return "fewer than 8 fields";
  auto tod = time_of_day(f[1]);
  auto q = num(f[6]), sats = num(f[7]);
  if (!tod || !q || !sats || *sats < 0 || *sats > 999) return "bad time, quality or satellites";
  if (!first_day_) return "no dated sentence (RMC, ZDA) before it: its day is unknown";
  if (*tod < last_tod_ - 43200) ++day_;  // past midnight before the next dated sentence
  last_tod_ = *tod;
  rec.kind = NmeaKind::kGga;
  rec.utc = day_ * 86400.0 + *tod;
  rec.fix = *q > 0;
  rec.sats = static_cast<int>(*sats);
  if (rec.fix) {
    auto lat = angle(f[2], f[3], 2, 90), lon = angle(f[4], f[5], 3, 180);
    if (!lat || !lon) return "bad position";
    rec.lat = *lat, rec.lon = *lon;
  }
  return std::nullopt;
}

bool NmeaReader::next(NmeaRecord& rec) {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_no_;
    ++summary_.lines;
    if (line.empty() || line == "\r") continue;
    if (!parse(line, rec)) continue;
    ++summary_.records;
    return true;
  }
  return false;
}

GnssFixes read_gnss_fixes(const std::string& dir, std::optional<PlaneOrigin> origin, const ReadPolicy& policy) {
  GnssFixes out;
  if (std::filesystem::exists(dir + "/gnss.nmea")) {
    out.source = dir + "/gnss.nmea";
    if (!origin) throw std::runtime_error(out.source + ": NMEA positions need the line's origin (\"origin\" in line.json)");
    NmeaReader r(out.source, policy);
    NmeaRecord rec;
    std::map<long, GnssFix> by_second;      // from GGA
    std::map<long, double> speed;           // from RMC
    while (r.next(rec)) {
      if (!rec.fix || rec.kind == NmeaKind::kZda) continue;
      long sec = std::lround(rec.utc);
      if (rec.kind == NmeaKind::kRmc) {
        speed[sec] = rec.speed_mps;
      } else {
        auto [x, y] = wgs84_to_plane(*origin, rec.lat, rec.lon);
        by_second[sec] = GnssFix{rec.utc, x, y, 0, rec.sats};
      }
    }
    for (auto& [sec, fix] : by_second) {
      auto sp = speed.find(sec);
      if (sp == speed.end()) continue;  // its RMC was lost: no speed
      fix.speed_mps = sp->second;
      out.fixes.push_back(fix);
    }
    out.read = r.summary();
    return out;
  }
  if (std::filesystem::exists(dir + "/gnss.csv")) {
    out.source = dir + "/gnss.csv";
    SensorCsvReader r(out.source, policy);
    SensorRow row;
    while (r.next(row))
      if (row.values.size() >= 5)
        out.fixes.push_back({row.values[0], row.values[1], row.values[2], row.values[3], static_cast<int>(row.values[4])});
    std::sort(out.fixes.begin(), out.fixes.end(), [](auto& a, auto& b) { return a.utc < b.utc; });
    out.read = r.summary();
    return out;
  }
  throw std::runtime_error(dir + ": no GNSS log (gnss.nmea or gnss.csv)");
}

}  // namespace yard::railway
