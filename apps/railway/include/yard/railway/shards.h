// Training shards: axle-box vibration in the distance domain, cut into labelled windows of tokens.
//
// Each axle-box sample is put on GNSS time (its clock fit) and on the track (the smoothed
// along-track estimate), then filtered into bands and binned per token (0.25 m of track):
//   features per token (kFeatures): log RMS acceleration, log energy below 100 Hz, 100-500 Hz,
//   above 500 Hz, log peak |acceleration|, speed / 44.4 m/s.
// Averaging over a token is the anti-alias filter of the resampling from time to distance.
// Windows of `tokens` tokens (stride `stride`) carry a defect class (a defect starting in the
// window's middle half, the most severe first: squat, insulated joint, weld, corrugation) and the
// mean irregularity amplitude (mm) as the regression target.
//
// Shard file format (little-endian), written to a temporary name, fsynced and renamed:
//   char[8] "YRDSHRD1"; u32 version (1); u32 windows; u32 tokens; u32 features;
//   per window: f64 start chainage (m); u8 class; f32 amplitude_mm; f32 x tokens*features;
//   u32 CRC-32 (IEEE) of every byte before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::railway {

inline constexpr uint32_t kFeatures = 6;

struct Window {
  double start_chainage = 0;
  uint8_t label = 0;
  float amplitude_mm = 0;
  std::vector<float> x;  // tokens * kFeatures
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

// Builds windows from a simulator-layout log directory (labels from truth.csv). When aligned, the
// position track and the axle-box clock are computed unless given.
std::vector<Window> build_windows(const std::string& dir, const ShardOptions& o, const PositionTrack* track = nullptr,
                                  const ClockFit* axle_clock = nullptr);
// Writes shards and manifest.json into out_dir.
ShardManifest write_shards(const std::vector<Window>& w, const std::string& out_dir, const ShardOptions& o);
// Reads one shard; throws std::runtime_error naming the file and what is wrong (bad magic,
// truncated, checksum mismatch).
std::vector<Window> read_shard(const std::string& path);

}  // namespace yard::railway
