#include "yard/actors/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace yard::actors {

double LrSchedule::peak() const {
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(std::max<int64_t>(1, base_batch));
}

double LrSchedule::at(int64_t step) const {
  double top = peak();
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr + (top - base_lr) * static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (decay == Decay::kConstant || total_steps <= warmup_steps) return top;
  double f = std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps), 0.0, 1.0);
  double end = top * final_fraction;
  return end + (top - end) * 0.5 * (1 + std::cos(M_PI * f));
}

LrSchedule::Decay LrSchedule::parse(const std::string& name) {
  if (name == "constant") return Decay::kConstant;
  if (name == "cosine") return Decay::kCosine;
  throw std::invalid_argument("unknown learning-rate decay '" + name + "' (constant or cosine)");
}

void ElasticLr::resize(int64_t step, int64_t global_batch, int64_t total_steps) {
  if (!changes.empty() && step < changes.back().step)
    throw std::invalid_argument("learning-rate schedule: a resize at step " + std::to_string(step) +
                                " comes before the last one (" + std::to_string(changes.back().step) + ")");
  if (!changes.empty() && step == changes.back().step) changes.pop_back();
  changes.push_back({step, global_batch, total_steps});
}

double ElasticLr::regime(size_t n, int64_t step) const {
  if (n == 0) return base.at(step);
  const auto& c = changes[n - 1];
  LrSchedule now = base;
  now.global_batch = c.global_batch;
  for (size_t k = n; k-- > 0;)  // the newest end of the decay set so far
    if (changes[k].total_steps > 0) {
      now.total_steps = changes[k].total_steps;
      break;
    }
  double target = now.at(step);
  int64_t since = step - c.step;
  if (since >= resize_warmup) return target;
  double w = static_cast<double>(since + 1) / static_cast<double>(resize_warmup + 1);
  return (1 - w) * regime(n - 1, step) + w * target;
}

double ElasticLr::at(int64_t step) const {
  size_t n = 0;
  while (n < changes.size() && changes[n].step <= step) ++n;
  return regime(n, step);
}

}  // namespace yard::actors
