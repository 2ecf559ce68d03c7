// The bound on pending calls, with threads standing in for submitters.
#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "submit/pending_calls.h"

using yard::detail::PendingCalls;
using namespace std::chrono_literals;

namespace {
template <class F>
bool within(std::chrono::milliseconds d, F f) {
  auto end = std::chrono::steady_clock::now() + d;
  while (!f())
    if (std::chrono::steady_clock::now() > end) return false;
    else std::this_thread::yield();
  return true;
}
}  // namespace

TEST_CASE("at the bound, entering waits until a pending call leaves", "[pending]") {
  PendingCalls p;
  p.set_limit(3);
  for (int i = 0; i < 3; ++i) p.enter();
  std::atomic<bool> entered{false};
  std::thread t([&] {
    p.enter();
    entered = true;
  });
  REQUIRE(within(10s, [&] { return p.waiters() == 1; }));
  CHECK_FALSE(entered.load());
  CHECK(p.count() == 3);
  p.leave();
  REQUIRE(within(10s, [&] { return entered.load(); }));
  t.join();
  CHECK(p.count() == 3);
  CHECK(p.peak() == 3);
}

TEST_CASE("many submitters never pass the bound", "[pending]") {
  PendingCalls p;
  p.set_limit(8);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        p.enter();
        p.leave();
      }
    });
  for (auto& t : ts) t.join();
  CHECK(p.count() == 0);
  CHECK(p.peak() <= 8);
}

TEST_CASE("no bound: entering never waits", "[pending]") {
  PendingCalls p;
  for (int i = 0; i < 10000; ++i) p.enter();
  CHECK(p.count() == 10000);
}
