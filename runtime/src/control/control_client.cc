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

void ControlClient::acknowledge(Redis& r) {
  if (!r.acknowledged(std::chrono::seconds(1)))
    spdlog::warn("no replica of the control store at {} acknowledged a write within 1 s", r.address());
}

}  // namespace yard::detail
