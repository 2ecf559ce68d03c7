// The bound on the calls (tasks, actor calls, actor creations) one process has submitted and not
// yet seen finish. Each costs its submitter memory until it finishes (its record, its result's
// entry, its arguments); at the bound, submitting waits until one finishes instead of letting the
// process grow without limit. Process-wide; counted by TaskSpec's life.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace yard::detail {

class PendingCalls {
 public:
  PendingCalls() = default;
  static PendingCalls& instance();
  // 0: no bound.
  void set_limit(size_t n) { limit_.store(n); }
  size_t limit() const { return limit_.load(); }
  // Counts one more call; blocks the calling thread while `limit` calls are pending.
  void enter();
  void leave();
  size_t count() const { return count_.load(); }
  size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(count_.load()); }
  int waiters() const { return waiting_.load(); }

 private:
  bool try_enter();
  std::atomic<size_t> limit_{0};
  std::atomic<size_t> count_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<int> waiting_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool warned_ = false;  // guarded by mu_
};

// The default bound: YARD_MAX_PENDING_TASKS, else 2,000,000 (about 1.5 GB of small tasks).
size_t default_pending_limit();

}  // namespace yard::detail
