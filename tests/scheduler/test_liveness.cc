// The failure detector's judgement of expired heartbeats (policy::Liveness): a clock in, a
// decision out. No Redis, no processes (suite quick).
#include <catch2/catch.hpp>

#include "policy/liveness.h"

using yard::sched::policy::Liveness;
using namespace std::chrono_literals;

namespace {
const Liveness::Clock::time_point kStart = Liveness::Clock::time_point{} + std::chrono::hours(1);
}  // namespace

TEST_CASE("checks on time judge silent nodes", "[policy][liveness]") {
  Liveness l(4000ms, 250ms);
  auto t = kStart;
  for (int i = 0; i < 20; ++i, t += 250ms) {
    CHECK(l.observe(t, false) == Liveness::Pause::kNone);
    CHECK(l.may_judge(t));
  }
  // A late check that a busy loop explains (well under half the timeout) still judges.
  t += 1500ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kNone);
  CHECK(l.may_judge(t));
}

TEST_CASE("after the detector stalled, nodes get a full timeout before any is judged", "[policy][liveness]") {
  Liveness l(4000ms, 250ms);
  auto t = kStart;
  l.observe(t, false);
  t += 250ms + 2001ms;  // a pause longer than the period and half the timeout
  CHECK(l.observe(t, false) == Liveness::Pause::kStalled);
  CHECK(l.last_gap() == 2251ms);
  CHECK_FALSE(l.may_judge(t));
  t += 3999ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kStalled);  // checks far apart keep pausing it
  t += 250ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kNone);
  CHECK_FALSE(l.may_judge(t + 3749ms));
  CHECK(l.may_judge(t + 3750ms));
}

TEST_CASE("a reconnect to the control store pauses judgement for a timeout", "[policy][liveness]") {
  Liveness l(2000ms, 250ms);
  auto t = kStart;
  l.observe(t, false);
  t += 250ms;
  CHECK(l.observe(t, true) == Liveness::Pause::kReconnected);
  CHECK_FALSE(l.may_judge(t + 1999ms));
  CHECK(l.may_judge(t + 2000ms));
}

TEST_CASE("the first check's gap is measured from the detector's start", "[policy][liveness]") {
  Liveness l(500ms, 250ms);
  auto t = kStart;
  l.begin(t);
  t += 250ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kNone);
  CHECK(l.may_judge(t));
  Liveness late(500ms, 250ms);
  late.begin(t);
  CHECK(late.observe(t + 501ms, false) == Liveness::Pause::kStalled);  // paused before its first check
  // Short timeouts: the period is part of the margin, so an on-time check never pauses.
  t += 500ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kNone);
  t += 501ms;
  CHECK(l.observe(t, false) == Liveness::Pause::kStalled);
}
