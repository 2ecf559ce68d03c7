#include "yard/internal/control_client.h"

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
    auto [host, port] = split_address(access.address);
    redis_ = std::make_unique<Redis>(host, port, access.password, timeout_);
  }
  return *redis_;
}

}  // namespace yard::detail
