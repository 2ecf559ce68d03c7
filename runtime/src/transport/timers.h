// The I/O loop's own work: timers (every period, or once after a delay) and the hooks that run
// at the end of each turn, before what the turn queued is sent. Loop thread only.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "framing.h"

namespace yard::detail {

class Timers {
 public:
  void every(std::chrono::milliseconds period, std::function<void()> fn);
  void after(std::chrono::milliseconds delay, std::function<void()> fn);
  // Runs the timers due at `now` (one may add timers).
  void run_due(Clock::time_point now);
  // `wait`, or less when a timer is due sooner (rounded up: a timer due in under a millisecond
  // is waited for, not spun on with zero timeouts).
  std::chrono::milliseconds wait_until_due(Clock::time_point now, std::chrono::milliseconds wait) const;

  // Runs once, at the end of this turn (before before_sending's hook).
  void at_turn_end(std::function<void()> fn) { turn_end_.push_back(std::move(fn)); }
  // Runs at the end of every turn, before what the turn queued is sent.
  void before_sending(std::function<void()> fn) { before_sending_ = std::move(fn); }
  // The end of a turn: the turn-end closures (one may queue another), then the before-sending hook.
  void end_turn();

 private:
  struct Timer {
    std::chrono::milliseconds period;
    Clock::time_point next;
    std::function<void()> fn;
    bool once = false;
  };
  std::vector<Timer> timers_;
  std::function<void()> before_sending_;
  std::vector<std::function<void()>> turn_end_;
};

// How long from `now` until `t`, rounded up to a millisecond (zero when past).
inline std::chrono::milliseconds until(Clock::time_point now, Clock::time_point t) {
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(t - now));
}

}  // namespace yard::detail
