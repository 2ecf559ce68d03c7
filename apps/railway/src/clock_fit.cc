#include "yard/railway/clock_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace yard::railway {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}
}  // namespace

double ClockFit::to_reference(double local, size_t k) const {
  return (local - segments[k].offset_s) / (1 + drift_ppm * 1e-6);
}

size_t ClockFit::segment_at_reference(double ref) const {
  for (size_t k = 0; k < segments.size(); ++k)
    if (ref < segments[k].ref_end || k + 1 == segments.size()) {
      if (k + 1 < segments.size() && ref >= segments[k].ref_end) continue;
      // Between segment k-1's end and k's start: the step happened somewhere in the gap; take
      // the nearer.
      if (k > 0 && ref < segments[k].ref_start &&
          ref - segments[k - 1].ref_end < segments[k].ref_start - ref)
        return k - 1;
      return k;
    }
  return segments.size() - 1;
}

double ClockFit::to_local(double ref) const {
  size_t k = segment_at_reference(ref);
  return segments[k].offset_s + (1 + drift_ppm * 1e-6) * ref;
}

PpsPairing pair_pps_edges(std::vector<double> e, std::vector<TimeMessage> m, double max_latency_s) {
  PpsPairing out;
  out.edges = e.size();
  std::sort(e.begin(), e.end());
  // Messages: the earliest arrival of each whole second named.
  std::sort(m.begin(), m.end(), [](auto& a, auto& b) { return a.utc != b.utc ? a.utc < b.utc : a.local < b.local; });
  std::vector<TimeMessage> msgs;
  for (auto& x : m) {
    double sec = std::round(x.utc);
    if (std::abs(x.utc - sec) > 0.05) continue;  // not a whole second: no edge marks it
    if (!msgs.empty() && msgs.back().utc == sec) continue;
    msgs.push_back({x.local, sec});
  }
  out.messages = msgs.size();
  std::sort(msgs.begin(), msgs.end(), [](auto& a, auto& b) { return a.local < b.local; });

  // Neighbours a whole number of seconds away.
  size_t n = e.size();
  std::vector<int> agree(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i > 4 ? i - 4 : 0; j < std::min(n, i + 5); ++j) {
      if (j == i) continue;
      double d = std::abs(e[j] - e[i]), k = std::round(d);
      if (k >= 1 && k <= 5 && std::abs(d - k) < 0.005 + 0.002 * k) ++agree[i];
    }
  std::vector<size_t> kept;
  for (size_t i = 0; i < n; ++i) {
    if (agree[i] < 2) continue;
    if (!kept.empty() && e[i] - e[kept.back()] < 0.5) {
      if (agree[i] > agree[kept.back()]) kept.back() = i;
      continue;
    }
    kept.push_back(i);
  }
  out.off_grid = n - kept.size();

  size_t q = 0;
  std::vector<bool> used(msgs.size(), false);
  for (size_t i : kept) {
    while (q < msgs.size() && msgs[q].local <= e[i]) ++q;
    if (q < msgs.size() && msgs[q].local - e[i] < max_latency_s) {
      out.pairs.emplace_back(e[i], msgs[q].utc);
      used[q] = true;
    } else {
      ++out.unlabelled;
    }
  }
  out.messages_unused = static_cast<uint64_t>(std::count(used.begin(), used.end(), false));
  return out;
}

namespace {

using Pairs = std::vector<std::pair<double, double>>;  // (local, reference), by reference time

// The pairs kept: all but outliers, a spike of about a second that the next pair takes back.
std::vector<size_t> without_spikes(const Pairs& p, uint64_t& outliers) {
  size_t n = p.size();
  std::vector<double> e(n, 0);  // excess local time per step of reference time
  for (size_t i = 1; i < n; ++i) e[i] = (p[i].first - p[i - 1].first) - (p[i].second - p[i - 1].second);
  std::vector<size_t> idx{0};
  for (size_t i = 1; i < n; ++i) {
    bool spike = i + 1 < n && std::abs(e[i]) > 0.3 && std::abs(e[i] + e[i + 1]) < 0.1 * std::abs(e[i]);
    if (spike) ++outliers;
    else idx.push_back(i);
  }
  return idx;
}

// Between consecutive kept pairs: the local clock's excess over the reference, the reference
// time between them, the typical excess rate (the drift) and the pairs' noise around it.
struct Excess {
  std::vector<double> excess, gap;
  double rate = 0, sigma = 0;
};
Excess excess_of(const Pairs& p, const std::vector<size_t>& idx) {
  Excess x;
  x.excess.assign(idx.size(), 0);
  x.gap.assign(idx.size(), 1);
  std::vector<double> rates;
  for (size_t j = 1; j < idx.size(); ++j) {
    x.gap[j] = p[idx[j]].second - p[idx[j - 1]].second;
    x.excess[j] = (p[idx[j]].first - p[idx[j - 1]].first) - x.gap[j];
    if (std::abs(x.excess[j]) < 0.05 * x.gap[j]) rates.push_back(x.excess[j] / x.gap[j]);
  }
  x.rate = median(rates);
  std::vector<double> dev;
  for (size_t j = 1; j < idx.size(); ++j) dev.push_back(std::abs(x.excess[j] - x.rate * x.gap[j]));
  x.sigma = std::max(1e-7, 1.4826 * median(dev));
  return x;
}

// Where the clock steps (each segment's first kept pair): a jump beyond the pair noise that the
// following pairs keep (their mean level stays shifted), not a lone spike.
std::vector<size_t> step_starts(const Pairs& p, const std::vector<size_t>& idx, const Excess& x) {
  std::vector<size_t> starts{0};
  for (size_t j = 1; j < idx.size(); ++j) {
    double jump = x.excess[j] - x.rate * x.gap[j];
    if (std::abs(jump) < std::max(6 * x.sigma, 2e-4)) continue;
    size_t w = std::min<size_t>(10, std::min(j, idx.size() - j - 1));
    if (w < 2) continue;
    double before = 0, after = 0;
    for (size_t q = 1; q <= w; ++q) {
      before += p[idx[j - q]].first - (1 + x.rate) * p[idx[j - q]].second;
      after += p[idx[j + q - 1]].first - (1 + x.rate) * p[idx[j + q - 1]].second;
    }
    double level = (after - before) / w;
    if (std::abs(level - jump) < std::max(0.5 * std::abs(jump), 4 * x.sigma)) starts.push_back(j);
  }
  return starts;
}

// Least squares over the kept pairs: a common slope, one intercept per segment; two passes of
// 4-sigma rejection. Fills the fit's drift, segments, residual and pairs used.
struct Segmented {
  const Pairs& p;
  const std::vector<size_t>& idx;
  const std::vector<size_t>& starts;
  std::vector<int> seg;    // each kept pair's segment
  std::vector<bool> keep;  // not rejected
  double slope;
  std::vector<double> icpt;

  Segmented(const Pairs& pairs, const std::vector<size_t>& i, const std::vector<size_t>& st, double rate)
      : p(pairs), idx(i), starts(st), seg(i.size()), keep(i.size(), true), slope(1 + rate), icpt(st.size(), 0) {
    for (size_t s = 0, j = 0; j < idx.size(); ++j) {
      while (s + 1 < starts.size() && j >= starts[s + 1]) ++s;
      seg[j] = static_cast<int>(s);
    }
  }
  double residual(size_t j) const { return p[idx[j]].first - icpt[seg[j]] - slope * p[idx[j]].second; }
  // One solve of the normal equations for [slope, c_0..c_{S-1}], reduced: slope = sum_k Sxy_k' / Sxx_k'.
  void solve() {
    size_t S = starts.size();
    std::vector<double> sx(S, 0), sy(S, 0), cnt(S, 0);
    for (size_t j = 0; j < idx.size(); ++j)
      if (keep[j]) {
        sx[seg[j]] += p[idx[j]].second;
        sy[seg[j]] += p[idx[j]].first;
        cnt[seg[j]] += 1;
      }
    double num = 0, den = 0;
    for (size_t j = 0; j < idx.size(); ++j)
      if (keep[j] && cnt[seg[j]] > 0) {
        double mx = sx[seg[j]] / cnt[seg[j]], my = sy[seg[j]] / cnt[seg[j]];
        num += (p[idx[j]].second - mx) * (p[idx[j]].first - my);
        den += (p[idx[j]].second - mx) * (p[idx[j]].second - mx);
      }
    if (den > 0) slope = num / den;
    for (size_t k = 0; k < S; ++k) icpt[k] = cnt[k] > 0 ? (sy[k] - slope * sx[k]) / cnt[k] : 0;
  }
  double sigma() const {
    double ss = 0;
    size_t m = 0;
    for (size_t j = 0; j < idx.size(); ++j)
      if (keep[j]) {
        double r = residual(j);
        ss += r * r;
        ++m;
      }
    return std::sqrt(ss / std::max<size_t>(1, m));
  }
  void fit_into(ClockFit& fit) {
    for (int pass = 0; pass < 3; ++pass) {
      solve();
      fit.sigma_s = sigma();
      if (pass == 2) break;
      for (size_t j = 0; j < idx.size(); ++j) keep[j] = std::abs(residual(j)) <= 4 * fit.sigma_s + 1e-9;
    }
    fit.drift_ppm = (slope - 1) * 1e6;
    for (size_t k = 0; k < starts.size(); ++k) {
      size_t first = starts[k], last = (k + 1 < starts.size() ? starts[k + 1] : idx.size()) - 1;
      fit.segments.push_back({p[idx[first]].second, p[idx[last]].second, icpt[k]});
    }
    for (size_t j = 0; j < idx.size(); ++j) fit.pairs_used += keep[j];
  }
};

}  // namespace

ClockFit fit_clock(std::vector<std::pair<double, double>> p) {
  std::sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.second < b.second; });
  p.erase(std::unique(p.begin(), p.end(), [](auto& a, auto& b) { return a.second == b.second; }), p.end());
  if (p.size() < 10) throw std::runtime_error("clock fit: fewer than 10 (local, reference) pairs");
  ClockFit fit;
  auto idx = without_spikes(p, fit.outliers);
  auto x = excess_of(p, idx);
  auto starts = step_starts(p, idx, x);
  Segmented(p, idx, starts, x.rate).fit_into(fit);
  return fit;
}

double ClockMapper::map(double local) {
  double ref = fit_.to_reference(local, seg_);
  // Across a step: the next segment applies once the reference time has reached its start and
  // its mapping is the one that continues the stream.
  while (seg_ + 1 < fit_.segments.size()) {
    double next = fit_.to_reference(local, seg_ + 1);
    const auto& ns = fit_.segments[seg_ + 1];
    const auto& cs = fit_.segments[seg_];
    bool past_current = ref > ns.ref_start + 0.5 * (ns.ref_start - cs.ref_end) + 1.0;
    bool next_continues = next >= cs.ref_end - 1.0 && std::abs(next - last_ref_) < std::abs(ref - last_ref_);
    if (past_current || (last_ref_ > cs.ref_end - 1.0 && next_continues)) {
      ++seg_;
      ref = next;
    } else {
      break;
    }
  }
  last_ref_ = ref;
  return ref;
}

}  // namespace yard::railway
