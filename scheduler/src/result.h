// Results of operations that report failure instead of throwing it (a reply, a callback): a value
// or the reason it could not be had. `Problem` is the result of an operation without a value.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace yard::sched {

using Problem = std::optional<std::string>;  // nullopt: it worked; else what went wrong

template <class T>
class [[nodiscard]] Result {
 public:
  static Result ok(T value) { return Result(std::move(value), {}); }
  static Result fail(std::string why) { return Result(std::nullopt, std::move(why)); }
  bool has_value() const { return value_.has_value(); }
  explicit operator bool() const { return has_value(); }
  const T& value() const { return *value_; }
  const std::string& why() const { return why_; }

 private:
  Result(std::optional<T> v, std::string why) : value_(std::move(v)), why_(std::move(why)) {}
  std::optional<T> value_;
  std::string why_;
};

}  // namespace yard::sched
