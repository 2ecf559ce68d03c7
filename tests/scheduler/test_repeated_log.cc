// Repeated identical errors at a bounded rate (a node's heartbeat to a control store that is gone).
#include <catch2/catch.hpp>

#include "common/repeated_log.h"

using yard::sched::RepeatedLog;
using namespace std::chrono_literals;

TEST_CASE("a repeated error is logged once, then at most once per interval with the count left out", "[repeated_log]") {
  RepeatedLog log(30s);
  auto t = RepeatedLog::Clock::time_point{} + 1000s;
  REQUIRE(log.failure("Redis is unreachable", t) == "Redis is unreachable");
  int logged = 0;
  for (int i = 1; i <= 59; ++i)  // every 0.5 s for 29.5 s
    if (log.failure("Redis is unreachable", t + i * 500ms)) ++logged;
  CHECK(logged == 0);
  auto again = log.failure("Redis is unreachable", t + 30s);
  REQUIRE(again);
  CHECK(*again == "Redis is unreachable (again 60 times in the last 30 s)");
  // Another error is news: logged at once.
  CHECK(log.failure("Redis refused the password", t + 31s) == "Redis refused the password");
  // The next success says the failures are over, once.
  CHECK(log.success(t + 40s) == "recovered after 62 failures over 40 s");
  CHECK_FALSE(log.success(t + 41s));
  CHECK(log.failure("Redis is unreachable", t + 42s) == "Redis is unreachable");
}
