// From windows' outputs to defects: where each class peaks in the middle half of a window classed
// as a defect, then overlapping findings of one class merged.
#include <algorithm>

#include "detect_impl.h"

namespace railway_detect {

namespace {

constexpr int kCorrugation = 4;
constexpr double kPeak = 0.5;   // a further peak of the class in the same half counts above this
constexpr int64_t kApart = 8;   // tokens (2 m) between two short defects of one class in a window

void short_defects(const WindowOutput& w, int c, int64_t lo, int64_t hi, double token_m, std::vector<Detection>& out) {
  std::vector<int64_t> taken;
  auto p = [&](int64_t j) { return w.tokens[size_t(j * 5 + c)]; };
  std::vector<int64_t> order;
  for (int64_t j = lo; j < hi; ++j) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p(a) > p(b); });
  for (int64_t j : order) {
    if (!taken.empty() && p(j) < kPeak) break;
    bool near = false;
    for (int64_t t : taken) near |= std::abs(t - j) < kApart;
    if (near) continue;
    taken.push_back(j);
    Detection d;
    d.kind = c;
    d.start_m = double(w.start + size_t(j)) * token_m;
    d.end_m = d.start_m + token_m;
    d.confidence = w.cls[size_t(c)];
    d.irregularity_mm = w.amplitude_mm;
    out.push_back(d);
  }
}

void patch(const WindowOutput& w, int64_t lo, int64_t hi, double token_m, std::vector<Detection>& out) {
  auto p = [&](int64_t j) { return w.tokens[size_t(j * 5 + kCorrugation)]; };
  int64_t best = lo;
  for (int64_t j = lo; j < hi; ++j)
    if (p(j) > p(best)) best = j;
  int64_t a = best, b = best + 1;
  while (a > lo && p(a - 1) > kPeak) --a;
  while (b < hi && p(b) > kPeak) ++b;
  Detection d;
  d.kind = kCorrugation;
  d.start_m = double(w.start + size_t(a)) * token_m;
  d.end_m = double(w.start + size_t(b)) * token_m;
  d.confidence = w.cls[kCorrugation];
  d.irregularity_mm = w.amplitude_mm;
  out.push_back(d);
}

}  // namespace

std::vector<Detection> find_defects(const std::vector<WindowOutput>& ws, int64_t tokens, double token_m) {
  std::vector<Detection> found;
  for (const auto& w : ws) {
    int c = static_cast<int>(std::max_element(w.cls.begin(), w.cls.end()) - w.cls.begin());
    if (c == 0) continue;
    if (c == kCorrugation) patch(w, tokens / 4, 3 * tokens / 4, token_m, found);
    else short_defects(w, c, tokens / 4, 3 * tokens / 4, token_m, found);
  }
  std::sort(found.begin(), found.end(), [](const Detection& a, const Detection& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.start_m < b.start_m;
  });
  std::vector<Detection> merged;
  for (auto& d : found) {
    if (!merged.empty() && merged.back().kind == d.kind && d.start_m <= merged.back().end_m + 1.0) {
      auto& m = merged.back();
      m.end_m = std::max(m.end_m, d.end_m);
      m.confidence = std::max(m.confidence, d.confidence);
      continue;
    }
    merged.push_back(d);
  }
  std::sort(merged.begin(), merged.end(), [](const Detection& a, const Detection& b) { return a.start_m < b.start_m; });
  return merged;
}

}  // namespace railway_detect
