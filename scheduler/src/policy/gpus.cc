#include "policy/gpus.h"

#include <algorithm>
#include <cmath>

namespace yard::sched::policy {

std::optional<GpuPool::Devices> GpuPool::take(double amount) {
  Devices out;
  if (!(amount > 0)) return out;
  if (amount >= 1 - 1e-9) {
    int whole = static_cast<int>(std::ceil(amount - 1e-9));
    for (size_t i = 0; i < free_.size() && static_cast<int>(out.size()) < whole; ++i)
      if (free_[i] >= 1 - 1e-9) out.emplace_back(static_cast<int>(i), 1.0);
    if (static_cast<int>(out.size()) < whole) return std::nullopt;
  } else {
    int best = -1;
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i] + 1e-9 >= amount && (best < 0 || free_[i] < free_[static_cast<size_t>(best)]))
        best = static_cast<int>(i);
    if (best < 0) return std::nullopt;
    out.emplace_back(best, amount);
  }
  for (auto& [d, share] : out) free_[static_cast<size_t>(d)] -= share;
  return out;
}

void GpuPool::give(const Devices& devices) {
  for (auto& [d, share] : devices)
    if (d >= 0 && static_cast<size_t>(d) < free_.size())
      free_[static_cast<size_t>(d)] = std::min(1.0, free_[static_cast<size_t>(d)] + share);
}

}  // namespace yard::sched::policy
