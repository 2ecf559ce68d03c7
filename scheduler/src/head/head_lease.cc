#include "head/head_lease.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include <spdlog/spdlog.h>

#include "yard/internal/keys.h"

namespace yard::sched {

namespace {

// KEYS: the lease, the head hash. ARGV: holder, address, TTL (ms), a dead holder it may take the
// lease from ("" none), unix time. {epoch, holder}: the new epoch, or 0 and the holder now.
const char* kAcquire = R"lua(
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and cur ~= ARGV[4] then return {0, cur} end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], 'address', ARGV[2], 'holder', ARGV[1], 'since', ARGV[5])
return {epoch, ARGV[1]}
)lua";

// KEYS: the lease, the head hash. ARGV: holder, epoch, TTL (ms). 1: renewed; 0: the epoch moved on
// or another holds the lease. A lease that ran out while no one took it is taken again.
const char* kRenew = R"lua(
if tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0') ~= tonumber(ARGV[2]) then return 0 end
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
)lua";

std::string connection_name(uint64_t epoch) { return "yard-head-" + std::to_string(epoch); }

}  // namespace

LeaseTiming LeaseTiming::from_env() {
  LeaseTiming t;
  if (const char* v = getenv("YARD_HEAD_LEASE_MS"); v && atol(v) >= 300) {
    t.ttl = std::chrono::milliseconds(atol(v));
    t.renew_every = std::max(std::chrono::milliseconds(100), t.ttl / 6);
  }
  return t;
}

HeadLease::HeadLease(detail::Redis& r, std::string address, LeaseTiming t)
    : r_(r), address_(std::move(address)), t_(t) {
  holder_ = address_ + " pid " + std::to_string(getpid()) + " at " + std::to_string(time(nullptr));
}

bool HeadLease::acquire(const std::string& dead_holder) {
  auto sent = std::chrono::steady_clock::now();
  auto r = r_.cmd({"EVAL", kAcquire, "2", keys::head_lease(), keys::head(), holder_, address_,
                   std::to_string(t_.ttl.count()), dead_holder, std::to_string(time(nullptr))});
  uint64_t epoch = std::strtoull(r.at(0).c_str(), nullptr, 10);
  if (epoch == 0) return false;
  epoch_ = epoch;
  valid_until_ = t_.deadline(sent);
  r_.fence([this] { return valid(); }, connection_name(epoch_));
  if (int closed = r_.close_named("yard-head-", connection_name(epoch_)))
    spdlog::warn("closed {} control-store connection{} of the heads before epoch {}", closed, closed == 1 ? "" : "s",
                 epoch_);
  return true;
}

bool HeadLease::renew() {
  auto sent = std::chrono::steady_clock::now();
  detail::Redis::Unfenced open(r_);
  auto r = r_.cmd({"EVAL", kRenew, "2", keys::head_lease(), keys::head(), holder_, std::to_string(epoch_),
                   std::to_string(t_.ttl.count())});
  if (r.integer() != 1) {
    valid_until_ = {};
    return false;
  }
  valid_until_ = t_.deadline(sent);
  return true;
}

}  // namespace yard::sched
