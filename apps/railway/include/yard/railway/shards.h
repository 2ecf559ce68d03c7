// Training shards: axle-box vibration in the distance domain, cut into labelled windows of tokens.
//
// Each axle-box sample is put on GNSS time (its clock fit) and on the track (the smoothed
// along-track estimate), then filtered into bands and binned per token (0.25 m of track); the
// features of a token are listed in `Feature`. Averaging over a token is the anti-alias filter of
// the resampling from time to distance.
// Every token carries the label of the most severe defect touching it (truth.csv's row); a window
// of `tokens` tokens (stride `stride`) carries the most severe label of its middle half (the part
// a detector reports from; the edges are context) and the mean irregularity amplitude (mm) as the
// regression target.
//
// Shard file format (little-endian), written to a temporary name, fsynced and renamed:
//   char[8] "YRDSHRD1"; u32 version (2); u32 windows; u32 tokens; u32 features;
//   per window: f64 start chainage (m); u8 class; f32 amplitude_mm; f32 x tokens*features;
//               u8 token class * tokens;
//   u32 CRC-32 (IEEE) of every byte before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::railway {

inline constexpr uint32_t kShardVersion = 2;

// The features of a token, in order.
enum Feature : uint32_t {
  kLogRms,        // log RMS acceleration
  kLogBelow100,   // log mean energy below 100 Hz (irregularity at speed)
  kLog100To220,   // log mean energy 100-220 Hz
  kLog220To500,   // log mean energy 220-500 Hz
  kLog500To850,   // log mean energy 500-850 Hz
  kLogAbove850,   // log mean energy above 850 Hz
  kPeakBelow100,  // log peak short-time (3 ms) energy in each band: an impact, however slow the
  kPeak100To220,  // train (a mean over a token dilutes it by the time the token takes)
  kPeak220To500,
  kPeak500To850,
  kPeakAbove850,
  kLogPeak,       // log peak |acceleration|
  kSpeed,         // speed / 44.4 m/s
  kEcho,          // a second impact: log of the high band's energy 2.5-6 ms after the token's
                  // strongest moment over its energy in the 2.5 ms from it (a joint's wheel strikes
                  // twice, a squat once)
  kFeatureCount
};
inline constexpr uint32_t kFeatures = kFeatureCount;
// The features' names, in Feature order (a manifest's and a model description's list).
const std::vector<std::string>& feature_names();

struct Window {
  double start_chainage = 0;
  uint8_t label = 0;
  float amplitude_mm = 0;
  std::vector<float> x;              // tokens * kFeatures
  std::vector<uint8_t> token_label;  // tokens
};

struct ShardOptions {
  uint32_t tokens = 128;
  uint32_t stride = 64;
  uint32_t windows_per_shard = 1024;
  bool aligned = true;  // false: the "aligner off" baseline (raw local time, raw odometer distance)
};

struct ShardManifest {
  std::vector<std::string> files;
  uint64_t windows = 0;
  std::vector<uint64_t> class_counts;
};

struct PositionTrack;
struct ClockFit;

// The distance-domain tokens of a log: features every 0.25 m from chainage 0 (a token the train
// did not pass has count 0 and zero features). When aligned, the position track and the axle-box
// clock are computed unless given; unaligned: raw odometer distance on the axle-box's own clock.
struct TokenGrid {
  std::vector<float> x;         // tokens * kFeatures
  std::vector<uint32_t> count;  // samples per token
  double first_s = 0, last_s = 0;  // time of the first and last sample on the track
  size_t size() const { return count.size(); }
};
TokenGrid build_tokens(const std::string& dir, bool aligned, const PositionTrack* track = nullptr,
                       const ClockFit* axle_clock = nullptr);

// Builds windows from a simulator-layout log directory (labels from truth.csv). When aligned, the
// position track and the axle-box clock are computed unless given.
std::vector<Window> build_windows(const std::string& dir, const ShardOptions& o, const PositionTrack* track = nullptr,
                                  const ClockFit* axle_clock = nullptr);
// Writes shards and manifest.json into out_dir.
ShardManifest write_shards(const std::vector<Window>& w, const std::string& out_dir, const ShardOptions& o);
// Reads one shard; throws std::runtime_error naming the file and what is wrong (bad magic,
// truncated, checksum mismatch, an older version).
std::vector<Window> read_shard(const std::string& path);

}  // namespace yard::railway
