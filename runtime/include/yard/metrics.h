// Metrics from any task, actor or driver, exported in Prometheus' format by the node the process
// runs on (`yard start --metrics-port`; `yard metrics-targets` lists the endpoints).
//
//   yard::metrics::Counter rows("railway_rows_aligned_total", "rows aligned", {"line"});
//   rows.inc(512, {{"line", "north"}});
//   yard::metrics::Gauge loss("railway_train_loss", "training loss of the last step", {"rank"});
//   loss.set(0.31, {{"rank", "0"}});
//   yard::metrics::Histogram step("railway_step_seconds", "time per step", {0.01, 0.1, 1}, {"rank"});
//   step.observe(0.07, {{"rank", "0"}});
//
// A name must be a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) and tag keys valid
// label names ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", not "node" or "le"); a bad name,
// tags other than the declared keys, a name already defined as another kind, or histogram bounds
// that do not increase throw yard::Error where the metric is made or used. Each process keeps its
// values and sends them to its node every 500 ms; the node adds up what its processes report
// (counters and histograms keep counting after a process exits; a gauge series set by several
// processes reports their sum, so tell them apart with a tag such as the rank). Cheap enough for
// every step of a training loop: one map lookup under a lock.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace yard::metrics {

using Tags = std::map<std::string, std::string>;

namespace detail {
struct Family;
}

class Counter {
 public:
  Counter(const std::string& name, const std::string& help, const std::vector<std::string>& tag_keys = {});
  // Adds `value` (≥ 0) to the series of `tags`.
  void inc(double value = 1, const Tags& tags = {});

 private:
  detail::Family* family_;
};

class Gauge {
 public:
  Gauge(const std::string& name, const std::string& help, const std::vector<std::string>& tag_keys = {});
  void set(double value, const Tags& tags = {});

 private:
  detail::Family* family_;
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, increasing (a last bucket, +Inf, is added).
  Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
            const std::vector<std::string>& tag_keys = {});
  void observe(double value, const Tags& tags = {});

 private:
  detail::Family* family_;
};

}  // namespace yard::metrics
