#include "task_events.h"

#include <algorithm>

namespace yard::detail {

namespace {
constexpr size_t kMaxPending = 20000;
constexpr size_t kPerReport = 5000;
}  // namespace

TaskEvents& TaskEvents::instance() {
  static TaskEvents* t = new TaskEvents();  // used until the process ends
  return *t;
}

void TaskEvents::record(const std::string& name, const char* kind, int64_t start_us, int64_t dur_us, bool ok) {
  std::lock_guard lk(mu_);
  if (pending_.size() >= kMaxPending) {
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back({name, kind, start_us, dur_us, ok});
}

bool TaskEvents::write(wire::MetricsReport::Builder out) {
  std::lock_guard lk(mu_);
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
    pending_.pop_front();
  }
  out.setEventsDropped(dropped_);
  dropped_ = 0;
  return true;
}

}  // namespace yard::detail
