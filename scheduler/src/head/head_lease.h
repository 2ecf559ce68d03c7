// The active head's lease in the control store, and the epoch that fences the heads before it.
//
// One head at a time holds the lease (yard:head:lease, a string with a TTL) and renews it every
// second; every new holder raises the epoch (yard:head, with the holder's address). A head that
// cannot renew stops writing before the lease can have run out in Redis (its own deadline is the
// renewal's send time plus the TTL, less a margin), so by the time a standby takes the lease the
// old head writes nothing: its connections are refused locally (Redis::fence), and the new holder
// closes those it left open (named yard-head-EPOCH). Every message a head sends carries its
// epoch, and a node refuses one from an epoch older than it knows. A standby announces itself
// (yard:head:standby:ADDRESS) and takes the lease once it is free.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "yard/internal/redis.h"

namespace yard::sched {

// The lease's timing: its TTL in Redis, how often it is renewed, and the holder's own deadline.
struct LeaseTiming {
  std::chrono::milliseconds ttl{6000};
  std::chrono::milliseconds renew_every{1000};
  // From YARD_HEAD_LEASE_MS (the TTL; renewed every sixth of it, at least every 100 ms).
  static LeaseTiming from_env();
  // Until when a holder whose renewal was sent at `sent` may write: a sixth of the TTL earlier
  // than Redis lets the lease go, for clocks that run at slightly different rates.
  std::chrono::steady_clock::time_point deadline(std::chrono::steady_clock::time_point sent) const {
    return sent + ttl - ttl / 6;
  }
};

class HeadLease {
 public:
  HeadLease(detail::Redis& r, std::string address, LeaseTiming t = LeaseTiming::from_env());

  // Takes the lease when it is free, or held by `dead_holder` (a head known to be gone), raising
  // the epoch; then fences this process's writes on it and closes the connections of the heads
  // before. False when another head holds it.
  bool acquire(const std::string& dead_holder = "");
  // Renews the lease (or takes it again when it ran out and no head took it since). False when
  // another head has taken it: this one must stop. Throws ConnectionError when Redis is out of
  // reach (the lease may still be held; valid() says until when).
  bool renew();
  // Whether this head may write now.
  bool valid() const { return epoch_ > 0 && std::chrono::steady_clock::now() < valid_until_; }
  uint64_t epoch() const { return epoch_; }
  const std::string& holder() const { return holder_; }
  const LeaseTiming& timing() const { return t_; }

 private:
  detail::Redis& r_;
  std::string address_, holder_;
  LeaseTiming t_;
  uint64_t epoch_ = 0;
  std::chrono::steady_clock::time_point valid_until_{};
};

}  // namespace yard::sched
