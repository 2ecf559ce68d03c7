// yard::Condition: a lock and a condition for the state a concurrent actor's calls share.
//
// The calls of an actor made with max_concurrency > 1 run on fibers of one thread, so a call that
// waits on a std::condition_variable would stop all of them. A call that waits on a Condition
// stops only itself; the actor's other calls go on (one of them makes the awaited state true).
// Plain threads may use it too.
//
//   yard::Condition cond;
//   int arrived = 0;
//   void arrive() { cond.update([&] { ++arrived; }); }
//   bool all_here(int n) { return cond.wait_for([&] { return arrived >= n; }, 10s); }
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace yard {

class Condition {
 public:
  Condition();
  ~Condition();
  Condition(const Condition&) = delete;
  Condition& operator=(const Condition&) = delete;

  // Waits until ready() holds, checked under the lock, or `timeout` passes; true when it holds.
  // With then, runs then() under the same lock once ready() holds.
  bool wait_for(const std::function<bool()>& ready, std::chrono::milliseconds timeout,
                const std::function<void()>& then = {});
  // Runs change() under the lock, then wakes every waiter.
  void update(const std::function<void()>& change);
  // Runs read() under the lock.
  void read(const std::function<void()>& read);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yard
