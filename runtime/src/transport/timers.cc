#include "timers.h"

namespace yard::detail {

void Timers::every(std::chrono::milliseconds period, std::function<void()> fn) {
  timers_.push_back(Timer{period, Clock::now() + period, std::move(fn)});
}

void Timers::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  timers_.push_back(Timer{delay, Clock::now() + delay, std::move(fn), true});
}

void Timers::run_due(Clock::time_point now) {
  for (size_t i = 0; i < timers_.size();) {
    if (timers_[i].next <= now) {
      timers_[i].next = now + timers_[i].period;
      auto fn = timers_[i].fn;  // the timer may add timers
      if (timers_[i].once) {
        timers_.erase(timers_.begin() + static_cast<long>(i));
        fn();
        continue;
      }
      fn();
    }
    ++i;
  }
}

std::chrono::milliseconds Timers::wait_until_due(Clock::time_point now, std::chrono::milliseconds wait) const {
  for (auto& t : timers_) wait = std::min(wait, until(now, t.next));
  return wait;
}

void Timers::end_turn() {
  while (!turn_end_.empty()) {
    auto due = std::move(turn_end_);
    turn_end_.clear();
    for (auto& fn : due) fn();
  }
  if (before_sending_) before_sending_();
}

}  // namespace yard::detail
