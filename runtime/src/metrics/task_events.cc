#include "metrics/task_events.h"

#include <algorithm>
#include <chrono>

namespace yard::detail {

namespace {
constexpr size_t kMaxPending = 20000;
constexpr size_t kPerReport = 5000;
// Spans a process keeps per second, with bursts up to kBurst: a trace is for a person to read, and
// at tens of thousands of tasks a second recording every one would cost the tasks a tenth of
// their speed. Spans past the budget are counted as dropped (the trace says how many).
constexpr double kSpansPerSecond = 2000;
constexpr double kBurst = 5000;

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

TaskEvents::TaskEvents() : budget_(kBurst), refilled_(std::chrono::steady_clock::now()) {}

TaskEvents& TaskEvents::instance() {
  static TaskEvents* t = new TaskEvents();  // used until the process ends
  return *t;
}

int64_t TaskEvents::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t TaskEvents::epoch_us(std::chrono::steady_clock::time_point t) {
  thread_local std::chrono::steady_clock::time_point read_at{};
  thread_local int64_t offset_us = 0;
  if (read_at == std::chrono::steady_clock::time_point{} || t - read_at > std::chrono::seconds(1) || t < read_at) {
    read_at = t;
    offset_us = now_us() - std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  }
  return offset_us + std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

void TaskEvents::record(const std::string& name, const char* kind, int64_t start_us, int64_t dur_us, bool ok,
                        uint64_t count) {
  record(name, kind, start_us, dur_us, ok, count, std::chrono::steady_clock::now());
}

bool TaskEvents::dropped_early(std::chrono::steady_clock::time_point now) {
  if (ns_of(now) >= empty_until_ns_.load(std::memory_order_relaxed)) return false;
  dropped_unlocked_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void TaskEvents::record(const std::string& name, const char* kind, int64_t start_us, int64_t dur_us, bool ok,
                        uint64_t count, std::chrono::steady_clock::time_point now) {
  if (dropped_early(now)) return;
  std::lock_guard lk(mu_);
  budget_ = std::min(kBurst, budget_ + kSpansPerSecond * std::chrono::duration<double>(now - refilled_).count());
  refilled_ = now;
  if (budget_ < 1) {
    ++dropped_;
    empty_until_ns_.store(ns_of(now) + static_cast<int64_t>((1 - budget_) / kSpansPerSecond * 1e9),
                          std::memory_order_relaxed);
    return;
  }
  budget_ -= 1;
  if (pending_.size() >= kMaxPending) {
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back({name, kind, start_us, dur_us, ok, count});
}

void TaskEvents::span(const std::string& name, const char* kind, std::chrono::steady_clock::time_point start,
                      std::chrono::steady_clock::time_point end, bool ok) {
  if (dropped_early(end)) return;
  record(name, kind, epoch_us(start), std::chrono::duration_cast<std::chrono::microseconds>(end - start).count(), ok,
         0, end);
}

bool TaskEvents::write(wire::MetricsReport::Builder out) {
  std::lock_guard lk(mu_);
  dropped_ += dropped_unlocked_.exchange(0, std::memory_order_relaxed);
  if (pending_.empty() && dropped_ == 0) return false;
  size_t n = std::min(pending_.size(), kPerReport);
  auto list = out.initEvents(static_cast<unsigned>(n));
  for (unsigned i = 0; i < n; ++i) {
    auto& e = pending_.front();
    auto w = list[i];
    w.setName(e.name);
    w.setKind(e.kind);
    w.setStartUs(e.start_us);
    w.setDurUs(e.dur_us);
    w.setOk(e.ok);
    w.setCount(e.count);
    pending_.pop_front();
  }
  out.setEventsDropped(dropped_);
  dropped_ = 0;
  return true;
}

}  // namespace yard::detail
