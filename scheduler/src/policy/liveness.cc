#include "policy/liveness.h"

namespace yard::sched::policy {

Liveness::Pause Liveness::observe(Clock::time_point now, bool reconnected) {
  gap_ = last_ == Clock::time_point{} ? Clock::duration{} : now - last_;
  last_ = now;
  Pause p = Pause::kNone;
  if (reconnected) p = Pause::kReconnected;
  else if (gap_ > period_ + timeout_ / 2) p = Pause::kStalled;
  if (p != Pause::kNone) grace_until_ = now + timeout_;
  return p;
}

}  // namespace yard::sched::policy
