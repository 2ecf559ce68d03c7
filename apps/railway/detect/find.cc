// From windows' outputs to defects. Windows overlap by half, so every token is seen by two of
// them, once in a middle half and once in a context quarter. A token's class probability is the
// mean over the windows that see it: a real defect is seen by both, while a window's stray
// response at a place with nothing there (the token head can echo a defect it sees elsewhere in
// the same window) is not confirmed by the other. Where that mean peaks for the short-defect
// classes, and a window whose middle half holds the place gives them some weight, a defect is
// reported. Corrugation (long patches) is reported from the windows classed as corrugation.
#include <algorithm>

#include "detect_impl.h"

namespace railway_detect {

namespace {

constexpr int kCorrugation = 4;
constexpr int kClasses = 5;

// The mean token probability of a short defect (any short class) a place needs, where it peaks...
constexpr double kToken = 0.65;
// ... and the short classes' probability of a window whose middle half holds it.
constexpr double kWindow = 0.3;
// Tokens between two defects of one class (2 m), and of different classes (1 m).
constexpr int64_t kApartSame = 8, kApartOther = 4;
constexpr double kPeak = 0.5;  // corrugation: how far a patch extends

struct Evidence {
  std::vector<float> mean;    // (tokens x 5) the mean over the windows that see the token
  std::vector<float> window;  // (tokens x 5) the highest class probability of a window whose middle half holds it
  std::vector<float> amp;     // the amplitude of that window
};

Evidence gather(const std::vector<WindowOutput>& ws, int64_t T) {
  size_t end = 0;
  for (const auto& w : ws) end = std::max(end, w.start + size_t(T));
  Evidence e;
  e.mean.assign(end * kClasses, 0.f);
  e.window.assign(end * kClasses, 0.f);
  e.amp.assign(end, 0.f);
  std::vector<int> seen(end, 0);
  for (const auto& w : ws)
    for (int64_t j = 0; j < T; ++j) {
      size_t a = w.start + size_t(j);
      ++seen[a];
      bool middle = j >= T / 4 && j < 3 * T / 4;
      for (int c = 0; c < kClasses; ++c) {
        e.mean[a * kClasses + size_t(c)] += w.tokens[size_t(j * kClasses + c)];
        if (middle) e.window[a * kClasses + size_t(c)] = std::max(e.window[a * kClasses + size_t(c)], w.cls[size_t(c)]);
      }
      if (middle) e.amp[a] = w.amplitude_mm;
    }
  for (size_t a = 0; a < end; ++a)
    for (int c = 0; c < kClasses; ++c)
      if (seen[a]) e.mean[a * kClasses + size_t(c)] /= float(seen[a]);
  return e;
}

void short_defects(const Evidence& e, double token_m, std::vector<Detection>& out) {
  struct Candidate {
    float p;
    size_t at;
    int c;
  };
  std::vector<Candidate> cand;
  size_t n = e.amp.size();
  for (size_t a = 0; a < n; ++a) {
    // A defect here at all: the short classes' probability together (a joint and a squat look
    // alike, and the head may split its belief between them); then which, by both heads.
    const float* m = &e.mean[a * kClasses];
    const float* w = &e.window[a * kClasses];
    float p = m[1] + m[2] + m[3];
    if (p < kToken || w[1] + w[2] + w[3] < kWindow) continue;
    int best = 1;
    for (int c = 2; c < kCorrugation; ++c)
      if (m[c] + w[c] > m[best] + w[best]) best = c;
    cand.push_back({p, a, best});
  }
  std::sort(cand.begin(), cand.end(), [](const Candidate& x, const Candidate& y) { return x.p > y.p; });
  std::vector<Candidate> taken;
  for (const auto& k : cand) {
    bool near = false;
    for (const auto& t : taken) {
      auto d = static_cast<int64_t>(k.at > t.at ? k.at - t.at : t.at - k.at);
      near |= d < (t.c == k.c ? kApartSame : kApartOther);
    }
    if (near) continue;
    taken.push_back(k);
    Detection d;
    d.kind = k.c;
    d.start_m = double(k.at) * token_m;
    d.end_m = d.start_m + token_m;
    d.confidence = e.window[k.at * kClasses + size_t(k.c)];
    d.irregularity_mm = e.amp[k.at];
    out.push_back(d);
  }
}

void patch(const WindowOutput& w, int64_t lo, int64_t hi, double token_m, std::vector<Detection>& out) {
  auto p = [&](int64_t j) { return w.tokens[size_t(j * kClasses + kCorrugation)]; };
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
  short_defects(gather(ws, tokens), token_m, found);
  for (const auto& w : ws) {
    int c = static_cast<int>(std::max_element(w.cls.begin(), w.cls.end()) - w.cls.begin());
    if (c == kCorrugation) patch(w, tokens / 4, 3 * tokens / 4, token_m, found);
  }
  std::sort(found.begin(), found.end(), [](const Detection& a, const Detection& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.start_m < b.start_m;
  });
  std::vector<Detection> merged;
  for (auto& d : found) {
    // A corrugation patch (tens of metres) may be broken where one window in it was classed
    // otherwise: pieces within a window's middle half of each other are one patch.
    double join = d.kind == kCorrugation ? double(tokens / 2) * token_m + 1.0 : 1.0;
    if (!merged.empty() && merged.back().kind == d.kind && d.start_m <= merged.back().end_m + join) {
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
