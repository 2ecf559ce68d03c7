#include "submit/pending_calls.h"

#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace yard::detail {

PendingCalls& PendingCalls::instance() {
  static PendingCalls* p = new PendingCalls();  // specs may outlive static destruction
  return *p;
}

// One atomic operation when under the bound. Over it, the count is given back and the caller
// waits in enter(), trying again under the lock, so no free place stays unused.
bool PendingCalls::try_enter() {
  size_t lim = limit_.load(std::memory_order_relaxed);
  size_t c = count_.fetch_add(1);
  if (lim != 0 && c >= lim) {
    count_.fetch_sub(1);
    return false;
  }
  size_t p = peak_.load(std::memory_order_relaxed);
  while (c + 1 > p && !peak_.compare_exchange_weak(p, c + 1)) {
  }
  return true;
}

void PendingCalls::enter() {
  if (try_enter()) return;
  std::unique_lock<std::mutex> l(mu_);
  if (!warned_) {
    warned_ = true;
    spdlog::info("{} calls are pending, the bound for this process (max_pending_tasks / YARD_MAX_PENDING_TASKS): "
                 "submitting waits for some to finish",
                 limit_.load());
  }
  ++waiting_;
  cv_.wait(l, [&] { return try_enter(); });
  --waiting_;
}

void PendingCalls::leave() {
  count_.fetch_sub(1);
  if (waiting_.load() > 0) {
    std::lock_guard<std::mutex> l(mu_);
    cv_.notify_all();
  }
}

size_t default_pending_limit() {
  if (const char* v = std::getenv("YARD_MAX_PENDING_TASKS"); v && *v) {
    try {
      return std::stoull(v);
    } catch (const std::exception&) {
      spdlog::warn("YARD_MAX_PENDING_TASKS='{}' is not a number: using the default", v);
    }
  }
  return 2'000'000;
}

}  // namespace yard::detail
