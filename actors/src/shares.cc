#include "yard/actors/shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace yard::actors {

namespace {

bool valid(double w) { return std::isfinite(w) && w > 0; }

// Invalid weights replaced by the mean of the valid ones (1 each when none is).
std::vector<double> filled(const std::vector<double>& weights) {
  double sum = 0;
  size_t n = 0;
  for (double w : weights)
    if (valid(w)) sum += w, ++n;
  double mean = n ? sum / static_cast<double>(n) : 1.0;
  std::vector<double> out;
  out.reserve(weights.size());
  for (double w : weights) out.push_back(valid(w) ? w : mean);
  return out;
}

}  // namespace

std::vector<uint64_t> split_by_weight(uint64_t total, const std::vector<double>& weights, uint64_t floor) {
  if (weights.empty()) throw std::invalid_argument("split_by_weight: no ranks");
  auto w = filled(weights);
  auto n = static_cast<uint64_t>(w.size());
  if (floor * n > total) floor = 0;
  // The floor first, then what is left in proportion, rounded down; the remainders go to the
  // largest fractions.
  uint64_t rest = total - floor * n;
  double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<uint64_t> out(w.size(), floor);
  std::vector<std::pair<double, size_t>> frac;
  uint64_t given = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double exact = static_cast<double>(rest) * w[i] / sum;
    auto whole = std::min<uint64_t>(rest - given, static_cast<uint64_t>(std::floor(exact)));
    out[i] += whole;
    given += whole;
    frac.emplace_back(exact - std::floor(exact), i);
  }
  std::stable_sort(frac.begin(), frac.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < rest; k = (k + 1) % frac.size(), ++given) ++out[frac[k].second];
  return out;
}

ShareBalancer::ShareBalancer(uint64_t global, int world, size_t window) : global_(global), window_(window) {
  if (world < 1) throw std::invalid_argument("ShareBalancer: no ranks");
  if (window < 1) throw std::invalid_argument("ShareBalancer: a window of no steps");
  seen_.resize(static_cast<size_t>(world));
  rates_.assign(static_cast<size_t>(world), 0.0);
  shares_ = split_by_weight(global_, rates_);
}

void ShareBalancer::observe(const std::vector<double>& rates) {
  if (rates.size() != rates_.size()) return;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (!valid(rates[i])) continue;
    auto& seen = seen_[i];
    seen.push_back(rates[i]);
    if (seen.size() > window_) seen.pop_front();
    std::vector<double> sorted(seen.begin(), seen.end());
    std::sort(sorted.begin(), sorted.end());
    size_t mid = sorted.size() / 2;
    rates_[i] = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }
  // Until every rank has a measurement the shares stay as they are (an unmeasured rank would
  // otherwise be guessed at the others' mean).
  if (std::all_of(rates_.begin(), rates_.end(), valid)) shares_ = split_by_weight(global_, rates_);
}

bool ShareBalancer::uneven() const {
  return std::adjacent_find(shares_.begin(), shares_.end(), std::not_equal_to<>()) != shares_.end();
}

}  // namespace yard::actors
