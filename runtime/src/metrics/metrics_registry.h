// The process's metrics: the families of yard/metrics.h and the runtime's own (tasks submitted,
// running, finished and failed by function, their duration, the shared-memory pool). Values are
// kept here and sent to the node manager (write_report) every 500 ms when something changed; the
// node adds up its processes' reports and serves them to Prometheus. YARD_METRICS=0 in the
// environment turns recording off.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "yard/metrics.h"
#include "wire.capnp.h"

namespace yard::metrics::detail {

enum class Kind : uint8_t { kCounter = 0, kGauge = 1, kHistogram = 2 };

struct Series {
  double value = 0;                // counter, gauge
  std::vector<uint64_t> buckets;   // histogram: one per bound, then +Inf
  double sum = 0;
  uint64_t count = 0;
};

struct Family {
  std::string name, help;
  Kind kind = Kind::kCounter;
  std::vector<std::string> keys;
  std::vector<double> bounds;
  std::map<std::vector<std::string>, Series> series;  // by tag values in key order
};

class Registry {
 public:
  static Registry& instance();
  bool enabled() const { return enabled_; }
  // The family, made on first use; throws yard::Error for a bad name, key or bounds, or a name
  // already defined differently.
  Family* define(const std::string& name, const std::string& help, Kind kind, const std::vector<std::string>& keys,
                 const std::vector<double>& bounds = {});
  void add(Family* f, const Tags& tags, double v);
  void set(Family* f, const Tags& tags, double v);
  void observe(Family* f, const Tags& tags, double v);
  // A task's or call's series, found once per function and then by pointer. Its events are
  // counted here without the registry's lock (every submitting and executing thread would meet
  // on it once per call) and folded into its series when a report is written.
  static constexpr std::array<double, 7> kDurationBounds{0.0001, 0.001, 0.01, 0.1, 1, 10, 100};  // seconds
  static constexpr size_t kDurationBuckets = kDurationBounds.size() + 1;                          // then +Inf
  struct TaskSeries {
    Series *submitted = nullptr, *running = nullptr, *finished = nullptr, *failed = nullptr, *duration = nullptr;
    std::atomic<uint64_t> n_submitted{0}, n_started{0}, n_finished{0}, n_failed{0};
    std::array<std::atomic<uint64_t>, kDurationBuckets> n_buckets{};
    std::atomic<uint64_t> sum_ns{0};
  };
  TaskSeries* task_series(const std::string& function);
  void task_submitted(TaskSeries* t);
  void task_started(TaskSeries* t);
  void task_ended(TaskSeries* t, bool ok, double seconds);
  // Every series into out.series, when something changed since the last call or `force` (false:
  // nothing written).
  bool write_report(wire::MetricsReport::Builder out, bool force);

 private:
  Registry();
  std::vector<std::string> values(const Family& f, const Tags& tags) const;
  static size_t bucket_of(const std::vector<double>& bounds, double v);  // the first bound >= v, else +Inf
  static void observe(const Family& f, Series& s, double v);
  void fold_tasks();  // under mu_
  void mark_dirty() { dirty_.store(true, std::memory_order_release); }
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>> families_;
  std::unordered_map<std::string, std::unique_ptr<TaskSeries>> tasks_;
  std::atomic<bool> dirty_{false};  // set after a change is made, taken before one is read
  bool enabled_ = true;
};

// The runtime's own families.
struct Builtin {
  Family *submitted, *running, *finished, *failed, *duration, *shm_bytes;
  static Builtin& get();
};

}  // namespace yard::metrics::detail
