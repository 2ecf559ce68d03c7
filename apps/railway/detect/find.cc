// From windows' outputs to defects: where each class peaks in the middle half of a window classed
// as a defect, then overlapping findings of one class merged.
#include <algorithm>
#include <cmath>

#include "detect_impl.h"

namespace railway_detect {

namespace {

constexpr int kCorrugation = 4;
// A window's class says a defect is in its middle half; the token head says where. A token whose
// own probability stays low is not the place (the window may only see a defect in its context
// quarters, which lies in its neighbour's half): no detection there.
constexpr double kFirst = 0.3;  // the strongest token of the class in the half counts above this
constexpr double kPeak = 0.5;   // a further peak of the class in the same half counts above this
constexpr int64_t kApart = 8;   // tokens (2 m) between two short defects of one class in a window
// Two windows can both point at one defect (one has it in its middle half, the other sees it from
// its context and picks a token near it): of findings of one class this close, the one whose token
// is surest stays.
constexpr double kOneDefect = 12.0;  // m

void short_defects(const WindowOutput& w, int c, int64_t lo, int64_t hi, double token_m, std::vector<Detection>& out) {
  std::vector<int64_t> taken;
  auto p = [&](int64_t j) { return w.tokens[size_t(j * 5 + c)]; };
  std::vector<int64_t> order;
  for (int64_t j = lo; j < hi; ++j) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p(a) > p(b); });
  for (int64_t j : order) {
    if (p(j) < (taken.empty() ? kFirst : kPeak)) break;
    bool near = false;
    for (int64_t t : taken) near |= std::abs(t - j) < kApart;
    if (near) continue;
    taken.push_back(j);
    Detection d;
    d.kind = c;
    d.start_m = double(w.start + size_t(j)) * token_m;
    d.end_m = d.start_m + token_m;
    d.confidence = w.cls[size_t(c)];
    d.token_probability = p(j);
    d.irregularity_mm = w.amplitude_mm;
    out.push_back(d);
  }
}

// Keeps, of short findings of one class within kOneDefect of each other, the surest.
std::vector<Detection> one_per_defect(std::vector<Detection> found) {
  std::sort(found.begin(), found.end(), [](const Detection& a, const Detection& b) { return a.token_probability > b.token_probability; });
  std::vector<Detection> kept;
  for (auto& d : found) {
    bool shadowed = false;
    for (auto& k : kept)
      shadowed |= d.kind != kCorrugation && k.kind == d.kind && std::abs(k.start_m - d.start_m) < kOneDefect;
    if (!shadowed) kept.push_back(d);
  }
  return kept;
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
  d.token_probability = p(best);
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
  found = one_per_defect(std::move(found));
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
