// A blocking client for the head's control requests, used by the `yard` CLI.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "io_loop.h"

namespace yard::sched {

class BlockingClient {
 public:
  BlockingClient(std::string address, std::string token);
  // Builds a request with `fill`, sends it, returns the reply. Throws yard::ConnectionError,
  // yard::AuthError or yard::Error (the daemon's error reply, with its message).
  std::unique_ptr<detail::InMessage> call(const std::function<void(wire::Envelope::Builder)>& fill,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(15));
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::unique_ptr<detail::IoLoop> io_;
};

}  // namespace yard::sched
