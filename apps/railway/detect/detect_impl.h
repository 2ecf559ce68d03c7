// The detector's parts below its public header: the model over windows (LibTorch inside), and
// the line's geometry for reporting.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "detect.h"
#include "yard/railway/shards.h"

namespace railway_detect {

// One window's output: class probabilities of its middle half, per-token class probabilities
// (tokens x 5), irregularity amplitude.
struct WindowOutput {
  size_t start = 0;  // token index of the window's first token
  std::vector<float> cls, tokens;
  float amplitude_mm = 0;
};

class WindowModel {
 public:
  explicit WindowModel(const std::string& checkpoint);
  ~WindowModel();
  WindowModel(WindowModel&&) noexcept;
  const std::string& path() const;
  int64_t tokens() const;
  int64_t stride() const;
  bool aligned() const;
  std::vector<WindowOutput> run(const yard::railway::TokenGrid& g, const std::vector<size_t>& starts, int threads) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Detections from the windows' outputs (before placing them on the map): per window whose middle
// half is classed as a defect, the tokens where that class peaks; overlapping ones merged.
std::vector<Detection> find_defects(const std::vector<WindowOutput>& ws, int64_t tokens, double token_m);

}  // namespace railway_detect
