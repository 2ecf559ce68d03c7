// What the head service and the node manager share: how a request is answered, how the process
// waits to be stopped, its log, and small helpers for files and resource lists. Each daemon owns
// its own state; nothing here holds any.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "yard/internal/messaging.h"
#include "policy/res.h"
#include "result.h"

namespace yard::sched {

using Clock = std::chrono::steady_clock;
using Incoming = detail::IoLoop::Incoming;

// Why a request is refused: the error code the answer carries, and the reason.
struct Rejection {
  wire::ErrorCode code;
  std::string why;
};

// A request answered later (when what it waits for happens, or at its deadline).
struct PendingReply {
  std::string routing;
  uint64_t req = 0;
  Clock::time_point deadline;
};

// Sends a daemon a request whose answer nobody waits for (10 s to deliver it).
void notify(detail::Messenger& io, const std::string& address, detail::Frames request, uint64_t rid);

// Answers on a daemon's ROUTER, with the cluster token.
class Replies {
 public:
  Replies(detail::Messenger& io, const std::string& token) : io_(io), token_(token) {}
  void ok(const Incoming& in) const;
  void error(const std::string& routing, uint64_t req, wire::ErrorCode code, const std::string& msg) const;
  void error(const Incoming& in, wire::ErrorCode code, const std::string& msg) const {
    error(in.routing_id, in.request_id(), code, msg);  // a call of a pushTasks: its own id
  }
  // Runs a request's handler; what it throws becomes the answer: a malformed request, the control
  // store out of reach (retry), anything else (internal).
  void guarded(const Incoming& in, const std::function<void()>& handler) const;
  // Relays a node manager's answer (ok, an error, or job info) to the request it was asked for.
  void relay(const std::string& routing, uint64_t req, const detail::InMessage& answer) const;

 private:
  detail::Messenger& io_;
  const std::string& token_;
};

// A Shutdown request asks the process to stop; wait_for_stop returns then.
void request_stop();
// Until SIGTERM, SIGINT or SIGHUP, a stop request, or the parent (`parent_pid`, when set) is gone;
// or `limit`: false when it passed without a stop.
bool wait_for_stop(pid_t parent_pid, std::chrono::milliseconds limit = std::chrono::hours(24 * 365 * 100));
// Blocks the stop signals (wait_for_stop takes them) and ignores SIGPIPE.
void take_stop_signals();
// The process's log (<log_dir>/<name>.log) as spdlog's default logger.
void open_log(const std::string& log_dir, const std::string& name);
// A daemon that could not start or run: the log, the readiness line and stderr say why.
void report_failure(int& ready_fd, const std::string& what);
// Writes the readiness line once ("address token_file" or "ERROR: ...") and closes the fd.
void report_ready(int& fd, const std::string& line);

// "exited with code N" or "killed by signal N (name)".
std::string describe_exit(int status);
// Writes bytes to `path` through a temporary file and a rename (mode 0755).
Problem write_file_atomic(const std::string& path, const char* data, size_t size);

// A message's resource list into `out` (amounts added up). The problem when an amount is bad.
inline Problem read_resources(capnp::List<wire::Resource>::Reader list, Res& out) {
  for (auto r : list) {
    if (!(r.getAmount() >= 0) || !std::isfinite(r.getAmount()))
      return "resource " + std::string(r.getName()) + " has a bad amount";
    out[r.getName()] += r.getAmount();
  }
  return std::nullopt;
}

}  // namespace yard::sched
