// When the failure detector may believe an expired heartbeat. A node's heartbeat key expiring in
// the control store says the node went silent, but only if the detector itself kept time: when
// the head's process or the control store stalled (a paused or overloaded machine, a reconnect to
// a new Redis), every node's key may expire at once with no node stopped. After such a stall the
// nodes get one full timeout to heartbeat again before any is declared dead. Pure: no processes,
// no I/O.
#pragma once

#include <chrono>

namespace yard::sched::policy {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  // `timeout`: a node's heartbeat lifetime; `period`: how often the detector checks.
  Liveness(std::chrono::milliseconds timeout, std::chrono::milliseconds period) : timeout_(timeout), period_(period) {}

  // The detector starts at `now`: the first check's gap is measured from here.
  void begin(Clock::time_point now) { last_ = now; }
  // Why a check may not judge: none, the store reconnected, or the detector stalled.
  enum class Pause { kNone, kReconnected, kStalled };
  // A check that read the silent nodes at `now` (after the read came back); `reconnected` when the
  // connection to the store was made again since the last check. A stall is a gap between checks
  // longer than `period` + half the timeout: with heartbeats every quarter of the timeout, a
  // shorter pause cannot have let a heartbeating node's key expire.
  Pause observe(Clock::time_point now, bool reconnected);
  // Whether silent nodes may be declared dead at `now`.
  bool may_judge(Clock::time_point now) const { return now >= grace_until_; }
  // The gap between the last two checks.
  Clock::duration last_gap() const { return gap_; }

 private:
  std::chrono::milliseconds timeout_, period_;
  Clock::time_point last_{};
  Clock::time_point grace_until_{};
  Clock::duration gap_{};
};

}  // namespace yard::sched::policy
