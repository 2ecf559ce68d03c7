#include "yard/internal/control_client.h"

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::detail {

ControlClient::ControlClient(Find find, std::chrono::milliseconds timeout) : find_(std::move(find)), timeout_(timeout) {}

std::string ControlClient::address() const {
  std::lock_guard<std::mutex> l(mu_);
  return redis_ ? redis_->address() : std::string();
}

Redis& ControlClient::connection() {
  if (!redis_) {
    auto access = find_();
    redis_ = std::make_unique<Redis>(sys::RedisEndpoint::parse(access.address), access.password, timeout_);
  }
  return *redis_;
}

// A write no replica holds may be lost in a failover: its caller hears so (and may write again),
// rather than counting on it.
void ControlClient::acknowledge(Redis& r) {
  if (!r.acknowledged(std::chrono::seconds(1)))
    throw ConnectionError("no replica of the control store at " + r.address() +
                          " acknowledged a write within 1 s (the primary may have failed over): it may be lost");
}

}  // namespace yard::detail
