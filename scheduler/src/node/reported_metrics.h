// The metrics the node's processes report (yard/metrics.h and the runtime's own: tasks by
// function, shared-memory pools), added up per series and served with the node's own. Each report
// is a process's whole state; a process that is gone keeps its counters and histograms counted
// (they never go down) and loses its gauges. Reports come in on the node's I/O thread; Prometheus
// reads from the metrics endpoint's thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "wire.capnp.h"

namespace yard::sched {

class ReportedMetrics : public prometheus::Collectable {
 public:
  explicit ReportedMetrics(std::string node_id) : node_(std::move(node_id)) {}
  using Clock = std::chrono::steady_clock;
  // `local`: the process runs on this host (its pid can be checked here).
  void report(int pid, bool local, wire::MetricsReport::Reader r);
  // Processes that are gone are folded into the totals: local ones `dead(pid)` says have exited,
  // and any that has not reported for 15 s (a process reports at least every 5 s).
  void sweep(const std::function<bool(int)>& dead, Clock::time_point now = Clock::now());
  std::vector<prometheus::MetricFamily> Collect() const override;
  size_t processes() const;

 private:
  using Tags = std::vector<std::pair<std::string, std::string>>;
  using Key = std::pair<std::string, Tags>;  // name, tags
  struct Value {
    bool seen = false;
    uint8_t kind = 0;  // 0 counter, 1 gauge, 2 histogram
    std::string help;
    double value = 0, sum = 0;
    uint64_t count = 0;
    std::vector<double> bounds;
    std::vector<uint64_t> buckets;
  };
  static void add(Value& to, const Value& v);

  std::string node_;
  mutable std::mutex mu_;
  struct Process {
    bool local = false;
    Clock::time_point seen;
    std::map<Key, Value> series;
  };
  std::map<int, Process> live_;
  std::map<Key, Value> retired_;
};

}  // namespace yard::sched
