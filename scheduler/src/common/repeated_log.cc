#include "common/repeated_log.h"

namespace yard::sched {

std::optional<std::string> RepeatedLog::failure(const std::string& msg, Clock::time_point now) {
  if (count_ == 0) first_ = now;
  ++count_;
  if (msg != last_) {
    last_ = msg;
    logged_ = now;
    left_out_ = 0;
    return msg;
  }
  if (now - logged_ < every_) {
    ++left_out_;
    return std::nullopt;
  }
  auto line = msg + " (again " + std::to_string(left_out_ + 1) + " times in the last " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - logged_).count()) + " s)";
  logged_ = now;
  left_out_ = 0;
  return line;
}

std::optional<std::string> RepeatedLog::success(Clock::time_point now) {
  if (count_ == 0) return std::nullopt;
  auto line = "recovered after " + std::to_string(count_) + " failures over " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - first_).count()) + " s";
  count_ = 0;
  left_out_ = 0;
  last_.clear();
  return line;
}

}  // namespace yard::sched
