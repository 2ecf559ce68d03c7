// ControlClient: a connection to a control store (Redis) that finds its address and password
// itself, on first use, and keeps them: the runtime's libraries and tools beside it run commands
// through it and never hold the password.
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "yard/errors.h"
#include "yard/internal/redis.h"

namespace yard::detail {

struct ControlStoreAccess {
  std::string address;   // "host:port"
  std::string password;  // "" when the store asks for none
};

class ControlClient {
 public:
  // `find` says where the store is; it is asked on first use and again after a lost connection
  // could not be made again (a store that moved). It may throw; its error reaches the caller.
  using Find = std::function<ControlStoreAccess()>;
  explicit ControlClient(Find find, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Runs fn(Redis&) with the connection held (one caller at a time) and returns what it returns.
  // When the connection was lost (a ConnectionError), fn runs once more on a new connection, so fn
  // must be idempotent. Other errors reach the caller as they are.
  //
  // On a replicated store, what fn wrote is on a replica too when run returns (WAIT), as far as a
  // replica acknowledges it within a second.
  template <class F>
  auto run(F&& fn) -> decltype(fn(std::declval<Redis&>())) {
    std::lock_guard<std::mutex> l(mu_);
    try {
      return durably(fn, connection());
    } catch (const ConnectionError&) {
      redis_.reset();
      return durably(fn, connection());
    }
  }
  // The same for a command that must not run twice (an increment): a connection that could not
  // be made is made again, but fn runs at most once; its lost connection reaches the caller.
  template <class F>
  auto run_once(F&& fn) -> decltype(fn(std::declval<Redis&>())) {
    std::lock_guard<std::mutex> l(mu_);
    Redis* r = nullptr;
    try {
      r = &connection();
    } catch (const ConnectionError&) {
      redis_.reset();
      r = &connection();
    }
    try {
      return durably(fn, *r);
    } catch (const ConnectionError&) {
      redis_.reset();
      throw;
    }
  }
  // Where the store is, once connected ("" before the first command).
  std::string address() const;

 private:
  Redis& connection();  // with mu_ held
  // With mu_ held: fn(r), then a replica's acknowledgement of what it wrote.
  template <class F>
  auto durably(F& fn, Redis& r) -> decltype(fn(r)) {
    if constexpr (std::is_void_v<decltype(fn(r))>) {
      fn(r);
      acknowledge(r);
    } else {
      auto v = fn(r);
      acknowledge(r);
      return v;
    }
  }
  void acknowledge(Redis& r);
  Find find_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::unique_ptr<Redis> redis_;  // guarded by mu_
};

// This process's client to the control store of the cluster it joined (yard::init): one for the
// whole process, made on first use. Throws yard::Error when the process is not connected.
std::shared_ptr<ControlClient> cluster_control();
// Where that control store is, with its password: for the daemons' and white-box tests' own
// connections (several at once, or Redis scripts run as a node would). Internal: no library gets
// this. Throws as cluster_control does.
ControlStoreAccess cluster_control_access();

}  // namespace yard::detail
