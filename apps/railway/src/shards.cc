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
#include "yard/railway/sim.h"

namespace yard::railway {

namespace {

int rank(uint8_t c) { return severity_rank(static_cast<DefectClass>(c)); }

}  // namespace

std::vector<Window> build_windows(const std::string& dir, const ShardOptions& o, const PositionTrack* given_track,
                                  const ClockFit* given_axle) {
  TokenGrid g = build_tokens(dir, o.aligned, given_track, given_axle);
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
      label.push_back(static_cast<uint8_t>(std::clamp(l, 0, 4)));
      amp.push_back(static_cast<float>(a));
    }
  }
  size_t n = std::min(g.size(), label.size());
  std::vector<Window> out;
  for (size_t start = 0; start + o.tokens <= n; start += o.stride) {
    Window w;
    w.start_chainage = start * 0.25;
    w.x.assign(g.x.begin() + static_cast<std::ptrdiff_t>(start * kFeatures),
               g.x.begin() + static_cast<std::ptrdiff_t>((start + o.tokens) * kFeatures));
    w.token_label.assign(label.begin() + static_cast<std::ptrdiff_t>(start),
                         label.begin() + static_cast<std::ptrdiff_t>(start + o.tokens));
    uint32_t empty = 0;
    double amp_sum = 0;
    for (uint32_t j = 0; j < o.tokens; ++j) {
      if (g.count[start + j] == 0) ++empty;
      else amp_sum += amp[start + j];
    }
    if (empty > o.tokens / 4) continue;  // mostly unobserved: the train did not get there
    w.amplitude_mm = static_cast<float>(amp_sum / (o.tokens - empty));
    uint8_t best = 0;
    for (uint32_t j = o.tokens / 4; j < 3 * o.tokens / 4; ++j)
      if (rank(w.token_label[j]) > rank(best)) best = w.token_label[j];
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
    uint32_t hdr[4] = {kShardVersion, static_cast<uint32_t>(count), o.tokens, kFeatures};
    put(hdr, sizeof hdr);
    for (size_t i = first; i < first + count; ++i) {
      const auto& w = ws[i];
      if (w.x.size() != size_t(o.tokens) * kFeatures || w.token_label.size() != o.tokens)
        throw std::runtime_error("window of the wrong size");
      put(&w.start_chainage, 8);
      put(&w.label, 1);
      put(&w.amplitude_mm, 4);
      put(w.x.data(), w.x.size() * 4);
      put(w.token_label.data(), w.token_label.size());
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
  nlohmann::json j = {{"format", "YRDSHRD1"}, {"version", kShardVersion}, {"tokens", o.tokens}, {"stride", o.stride},
                      {"token_m", 0.25}, {"features", feature_names()},
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
  if (hdr[0] != kShardVersion)
    throw std::runtime_error(path + ": shard version " + std::to_string(hdr[0]) + ", this program reads version " +
                             std::to_string(kShardVersion) + " (remove the shard directory to make it again)");
  if (hdr[3] != kFeatures)
    throw std::runtime_error(path + ": " + std::to_string(hdr[3]) + " features per token, this program uses " +
                             std::to_string(kFeatures));
  size_t per = 8 + 1 + 4 + size_t(hdr[2]) * hdr[3] * 4 + hdr[2];
  if (buf.size() != 8 + 16 + per * hdr[1] + 4) throw std::runtime_error(path + ": size does not match its header");
  std::vector<Window> out(hdr[1]);
  const uint8_t* p = buf.data() + 24;
  for (auto& w : out) {
    std::memcpy(&w.start_chainage, p, 8);
    w.label = p[8];
    std::memcpy(&w.amplitude_mm, p + 9, 4);
    w.x.resize(size_t(hdr[2]) * hdr[3]);
    std::memcpy(w.x.data(), p + 13, w.x.size() * 4);
    w.token_label.assign(p + 13 + w.x.size() * 4, p + 13 + w.x.size() * 4 + hdr[2]);
    p += per;
  }
  return out;
}

}  // namespace yard::railway
