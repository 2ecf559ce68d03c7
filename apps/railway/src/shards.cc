#include "yard/railway/shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "yard/actors/crc32.h"
#include "yard/railway/align.h"
#include "yard/railway/position.h"
#include "yard/railway/readers.h"

namespace yard::railway {

namespace {

// RBJ biquad.
struct Biquad {
  double b0, b1, b2, a1, a2, z1 = 0, z2 = 0;
  static Biquad make(bool low, double f, double fs) {
    double w = 2 * M_PI * f / fs, c = std::cos(w), al = std::sin(w) / (2 * 0.7071);
    double a0 = 1 + al;
    Biquad q{};
    if (low) {
      q.b0 = (1 - c) / 2 / a0, q.b1 = (1 - c) / a0, q.b2 = (1 - c) / 2 / a0;
    } else {
      q.b0 = (1 + c) / 2 / a0, q.b1 = -(1 + c) / a0, q.b2 = (1 + c) / 2 / a0;
    }
    q.a1 = -2 * c / a0, q.a2 = (1 - al) / a0;
    return q;
  }
  double step(double x) {
    double y = b0 * x + z1;
    z1 = b1 * x - a1 * y + z2;
    z2 = b2 * x - a2 * y;
    return y;
  }
};

struct Token {
  double sum2 = 0, low = 0, mid = 0, high = 0, peak = 0, speed = 0;
  uint32_t n = 0;
};

uint8_t severity_rank(uint8_t c) {  // squat > insulated joint > weld > corrugation > none
  switch (c) {
    case 1: return 4;
    case 3: return 3;
    case 2: return 2;
    case 4: return 1;
    default: return 0;
  }
}

}  // namespace

std::vector<Window> build_windows(const std::string& dir, const ShardOptions& o, const PositionTrack* given_track,
                                  const ClockFit* given_axle) {
  // Where the train was: chainage against reference time (smoothed), or, with the aligner off,
  // the raw odometer distance against the odometer's own clock.
  std::vector<double> pt, ps;
  std::optional<ClockFit> axle_clock;
  if (o.aligned) {
    std::optional<std::map<std::string, ClockReport>> clocks;
    if (!given_track || !given_axle) clocks = align_clocks(dir);
    std::optional<PositionTrack> own;
    if (!given_track) own = estimate_position(dir, *clocks);
    const PositionTrack& track = given_track ? *given_track : *own;
    pt = track.t;
    ps = track.s;
    if (given_axle) {
      axle_clock = *given_axle;
    } else {
      auto it = clocks->find("axlebox");
      if (it == clocks->end()) throw std::runtime_error(dir + ": no axlebox_pps.csv");
      axle_clock = it->second.fit;
    }
  } else {
    SensorCsvReader r(dir + "/odometer.csv");
    SensorRow row;
    while (r.next(row))
      if (row.values.size() >= 2) pt.push_back(row.time), ps.push_back(row.values[1]);
  }
  if (pt.size() < 2) throw std::runtime_error(dir + ": no position track");
  auto s_at = [&](double t, size_t& k) {
    while (k + 1 < pt.size() && pt[k + 1] <= t) ++k;
    if (t <= pt.front() || k + 1 >= pt.size()) return -1.0;
    double f = (t - pt[k]) / std::max(1e-12, pt[k + 1] - pt[k]);
    return ps[k] + (ps[k + 1] - ps[k]) * f;
  };

  const double step = 0.25;
  std::vector<Token> tokens;
  {
    ReadPolicy p;
    p.non_monotonic = OnBad::kDrop;
    SensorCsvReader r(dir + "/axlebox.csv", p);
    SensorRow row;
    std::optional<ClockMapper> mapper;
    if (axle_clock) mapper.emplace(*axle_clock);
    double fs = 2500;
    auto lp = Biquad::make(true, 100, fs), bp_hi = Biquad::make(true, 500, fs), bp_lo = Biquad::make(false, 100, fs),
         hp = Biquad::make(false, 500, fs);
    size_t k = 0;
    double prev_s = -1, prev_t = -1;
    while (r.next(row)) {
      if (row.values.empty()) continue;
      double t = mapper ? mapper->map(row.time) : row.time;
      double a = row.values[0];
      double lo = lp.step(a), mid = bp_hi.step(bp_lo.step(a)), hi = hp.step(a);
      double s = s_at(t, k);
      if (s < 0) continue;
      size_t idx = static_cast<size_t>(s / step);
      if (idx >= tokens.size()) tokens.resize(idx + 1);
      auto& tk = tokens[idx];
      tk.sum2 += a * a;
      tk.low += lo * lo;
      tk.mid += mid * mid;
      tk.high += hi * hi;
      tk.peak = std::max(tk.peak, std::abs(a));
      if (prev_t >= 0 && t > prev_t) tk.speed += std::max(0.0, (s - prev_s) / (t - prev_t));
      ++tk.n;
      prev_s = s, prev_t = t;
    }
  }
  // Labels and targets from the truth grid (same 0.25 m steps).
  std::vector<uint8_t> label;
  std::vector<float> amp;
  {
    std::ifstream in(dir + "/truth.csv");
    if (!in) throw std::runtime_error(dir + ": no truth.csv for labels");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      double s, t, v, irr, a;
      int l;
      if (std::sscanf(line.c_str(), "%lf,%lf,%lf,%d,%lf,%lf", &s, &t, &v, &l, &irr, &a) != 6) continue;
      label.push_back(static_cast<uint8_t>(l));
      amp.push_back(static_cast<float>(a));
    }
  }
  size_t n = std::min(tokens.size(), label.size());
  std::vector<Window> out;
  for (size_t start = 0; start + o.tokens <= n; start += o.stride) {
    Window w;
    w.start_chainage = start * step;
    w.x.resize(size_t(o.tokens) * kFeatures);
    uint32_t empty = 0;
    double amp_sum = 0;
    for (uint32_t j = 0; j < o.tokens; ++j) {
      const Token& tk = tokens[start + j];
      float* f = &w.x[size_t(j) * kFeatures];
      if (tk.n == 0) {
        ++empty;
        continue;
      }
      double inv = 1.0 / tk.n;
      f[0] = static_cast<float>(0.5 * std::log(1e-6 + tk.sum2 * inv));
      f[1] = static_cast<float>(std::log(1e-6 + tk.low * inv));
      f[2] = static_cast<float>(std::log(1e-6 + tk.mid * inv));
      f[3] = static_cast<float>(std::log(1e-6 + tk.high * inv));
      f[4] = static_cast<float>(std::log(1e-6 + tk.peak));
      f[5] = static_cast<float>(tk.speed * inv / 44.4);
      amp_sum += amp[start + j];
    }
    if (empty > o.tokens / 4) continue;  // mostly unobserved: the train did not get there
    w.amplitude_mm = static_cast<float>(amp_sum / (o.tokens - empty));
    uint8_t best = 0;
    for (uint32_t j = o.tokens / 4; j < 3 * o.tokens / 4; ++j) {
      uint8_t c = label[start + j];
      // A defect counts where it starts, so one defect labels the windows whose middle holds it.
      bool starts = c != 0 && (start + j == 0 || label[start + j - 1] != c);
      if (starts && severity_rank(c) > severity_rank(best)) best = c;
    }
    w.label = best;
    out.push_back(std::move(w));
  }
  return out;
}

ShardManifest write_shards(const std::vector<Window>& ws, const std::string& out_dir, const ShardOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(out_dir);
  ShardManifest m;
  m.class_counts.assign(5, 0);
  for (size_t first = 0, shard = 0; first < ws.size(); first += o.windows_per_shard, ++shard) {
    size_t count = std::min<size_t>(o.windows_per_shard, ws.size() - first);
    std::vector<uint8_t> buf;
    auto put = [&](const void* p, size_t n) {
      auto* b = static_cast<const uint8_t*>(p);
      buf.insert(buf.end(), b, b + n);
    };
    put("YRDSHRD1", 8);
    uint32_t hdr[4] = {1, static_cast<uint32_t>(count), o.tokens, kFeatures};
    put(hdr, sizeof hdr);
    for (size_t i = first; i < first + count; ++i) {
      const auto& w = ws[i];
      if (w.x.size() != size_t(o.tokens) * kFeatures) throw std::runtime_error("window of the wrong size");
      put(&w.start_chainage, 8);
      put(&w.label, 1);
      put(&w.amplitude_mm, 4);
      put(w.x.data(), w.x.size() * 4);
      ++m.class_counts[std::min<size_t>(4, w.label)];
    }
    uint32_t crc = actors::crc32(buf.data(), buf.size());
    put(&crc, 4);
    char name[64];
    std::snprintf(name, sizeof name, "shard-%05zu.bin", shard);
    std::string path = out_dir + "/" + name, tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot write " + tmp);
    size_t off = 0;
    while (off < buf.size()) {
      ssize_t n = ::write(fd, buf.data() + off, buf.size() - off);
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("write failed: " + tmp);
      }
      off += static_cast<size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
    fs::rename(tmp, path);
    m.files.push_back(name);
    m.windows += count;
  }
  nlohmann::json j = {{"format", "YRDSHRD1"}, {"tokens", o.tokens}, {"stride", o.stride}, {"token_m", 0.25},
                      {"features", {"log_rms", "log_e_lt100Hz", "log_e_100_500Hz", "log_e_gt500Hz", "log_peak", "speed_rel"}},
                      {"classes", {"none", "squat", "weld", "insulated_joint", "corrugation"}},
                      {"aligned", o.aligned}, {"windows", m.windows}, {"class_counts", m.class_counts}, {"shards", m.files}};
  std::ofstream(out_dir + "/manifest.json") << j.dump(2) << "\n";
  return m;
}

std::vector<Window> read_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (buf.size() < 8 + 16 + 4 || std::memcmp(buf.data(), "YRDSHRD1", 8) != 0)
    throw std::runtime_error(path + ": not a shard (bad magic or too short)");
  uint32_t stored;
  std::memcpy(&stored, buf.data() + buf.size() - 4, 4);
  if (actors::crc32(buf.data(), buf.size() - 4) != stored) throw std::runtime_error(path + ": checksum mismatch (corrupt or truncated)");
  uint32_t hdr[4];
  std::memcpy(hdr, buf.data() + 8, 16);
  if (hdr[0] != 1) throw std::runtime_error(path + ": unknown shard version " + std::to_string(hdr[0]));
  size_t per = 8 + 1 + 4 + size_t(hdr[2]) * hdr[3] * 4;
  if (buf.size() != 8 + 16 + per * hdr[1] + 4) throw std::runtime_error(path + ": size does not match its header");
  std::vector<Window> out(hdr[1]);
  const uint8_t* p = buf.data() + 24;
  for (auto& w : out) {
    std::memcpy(&w.start_chainage, p, 8);
    w.label = p[8];
    std::memcpy(&w.amplitude_mm, p + 9, 4);
    w.x.resize(size_t(hdr[2]) * hdr[3]);
    std::memcpy(w.x.data(), p + 13, w.x.size() * 4);
    p += per;
  }
  return out;
}

}  // namespace yard::railway
