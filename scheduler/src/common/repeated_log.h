// Repeated identical errors logged at a bounded rate. A daemon that retries something every
// fraction of a second (a heartbeat to a control store that is gone) would otherwise write the
// same line for ever: the first occurrence is logged at once, the same message again at most once
// per interval with how many times it was left out, and the next success says how long it lasted.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace yard::sched {

class RepeatedLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RepeatedLog(std::chrono::seconds every = std::chrono::seconds(30)) : every_(every) {}

  // The line to log now for this failure; nullopt when it is left out.
  std::optional<std::string> failure(const std::string& msg, Clock::time_point now);
  // A success after failures: the line that says they are over (nullopt when there were none).
  std::optional<std::string> success(Clock::time_point now);

 private:
  std::chrono::seconds every_;
  std::string last_;
  Clock::time_point first_{}, logged_{};
  long left_out_ = 0, count_ = 0;
};

}  // namespace yard::sched
