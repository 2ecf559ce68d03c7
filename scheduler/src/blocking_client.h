// A blocking client for the head's control requests, used by the `yard` CLI.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yard/internal/messaging.h"
#include "yard/errors.h"

namespace yard::sched {

class BlockingClient {
 public:
  // The head at `address`, or the one of several ("A,B,C": a head and its standbys) that serves.
  BlockingClient(std::string address, std::string token);
  // A head that does not serve now: starting, or a standby (its message says which).
  class Unavailable : public Error {
   public:
    using Error::Error;
  };
  // Builds a request with `fill`, sends it, returns the reply. Throws yard::ConnectionError,
  // yard::AuthError, Unavailable or yard::Error (the daemon's error reply, with its message).
  std::unique_ptr<detail::InMessage> call(const std::function<void(wire::Envelope::Builder)>& fill,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // The head that answered last (the first, before any answer).
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<detail::InMessage> call_one(const std::string& at,
                                              const std::function<void(wire::Envelope::Builder)>& fill,
                                              std::chrono::milliseconds timeout);
  std::vector<std::string> addresses_;
  size_t current_ = 0;
  std::string address_;
  std::unique_ptr<detail::IoLoop> io_;
};

}  // namespace yard::sched
