// The task timeline of a process: one span per task or actor call it ran (what, when, how long,
// whether it returned) and per object it fetched from another process (kind "transfer", with
// its bytes), kept until the next metrics report carries them to the node manager,
// which appends them to its job's timeline in the control store (`yard timeline`). A process
// keeps up to 2,000 spans a second (bursts of 5,000) and at most 20,000 waiting between reports;
// the rest are dropped and counted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "wire.capnp.h"

namespace yard::detail {

class TaskEvents {
 public:
  static TaskEvents& instance();
  // `kind`: "task", "actor_call" or "transfer"; times in microseconds since the Unix epoch;
  // `count`: a transfer's bytes.
  void record(const std::string& name, const char* kind, int64_t start_us, int64_t dur_us, bool ok,
              uint64_t count = 0);
  // The same, with the steady clock's time now already read by the caller.
  void record(const std::string& name, const char* kind, int64_t start_us, int64_t dur_us, bool ok,
              uint64_t count, std::chrono::steady_clock::time_point now);
  // A task's span between two moments of the steady clock: its times since the epoch are worked
  // out only for a span that is kept (most are dropped, past the budget).
  void span(const std::string& name, const char* kind, std::chrono::steady_clock::time_point start,
            std::chrono::steady_clock::time_point end, bool ok);
  static int64_t now_us();
  // now_us() for a moment of the steady clock, through an offset between the two clocks that each
  // thread reads again every second: one clock read per span's end instead of two.
  static int64_t epoch_us(std::chrono::steady_clock::time_point t);
  // Moves what is waiting (up to 5,000) into the report; false when nothing was.
  bool write(wire::MetricsReport::Builder out);
  bool pending() {
    std::lock_guard lk(mu_);
    return !pending_.empty();
  }

 private:
  struct Event {
    std::string name;
    const char* kind;
    int64_t start_us, dur_us;
    bool ok;
    uint64_t count;
  };
  std::mutex mu_;
  std::deque<Event> pending_;
  uint64_t dropped_ = 0;
  TaskEvents();
  // The span budget (a token bucket: kSpansPerSecond, bursts of kBurst).
  double budget_;
  std::chrono::steady_clock::time_point refilled_;
  // Once the budget is spent, it stays under one span until this moment (the steady clock, in ns):
  // a span ending before it is dropped and counted without the lock, as most are at thousands of
  // calls a second.
  std::atomic<int64_t> empty_until_ns_{0};
  std::atomic<uint64_t> dropped_unlocked_{0};
  // True, with the span counted, when the budget is still spent at `now` (no lock taken).
  bool dropped_early(std::chrono::steady_clock::time_point now);
};

}  // namespace yard::detail
