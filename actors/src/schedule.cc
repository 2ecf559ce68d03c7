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

}  // namespace yard::actors
