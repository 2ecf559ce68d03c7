#include "node/reported_metrics.h"

#include <limits>

namespace yard::sched {

void ReportedMetrics::report(int pid, bool local, wire::MetricsReport::Reader r) {
  if (!r.hasSeries()) {  // spans only: the values are as they were
    std::lock_guard lk(mu_);
    if (auto it = live_.find(pid); it != live_.end()) it->second.seen = Clock::now();
    return;
  }
  std::map<Key, Value> next;
  for (auto s : r.getSeries()) {
    Tags tags;
    for (auto t : s.getTags()) tags.emplace_back(t.getKey(), t.getValue());
    Value v;
    v.seen = true;
    v.kind = s.getKind();
    if (v.kind > 2) continue;  // a kind this node does not know
    v.help = s.getHelp();
    v.value = s.getValue();
    v.sum = s.getSum();
    v.count = s.getCount();
    for (auto b : s.getBounds()) v.bounds.push_back(b);
    for (auto c : s.getBuckets()) v.buckets.push_back(c);
    if (v.kind == 2 && v.buckets.size() != v.bounds.size() + 1) continue;  // malformed
    next[{s.getName(), std::move(tags)}] = std::move(v);
  }
  std::lock_guard lk(mu_);
  live_[pid] = {local, Clock::now(), std::move(next)};
}

void ReportedMetrics::add(Value& to, const Value& v) {
  if (!to.seen) {
    to = v;
    return;
  }
  if (to.kind != v.kind) return;  // the same name as another kind elsewhere: the first one wins
  to.value += v.value;
  to.sum += v.sum;
  to.count += v.count;
  if (to.bounds == v.bounds)
    for (size_t i = 0; i < to.buckets.size(); ++i) to.buckets[i] += v.buckets[i];
}

void ReportedMetrics::sweep(const std::function<bool(int)>& dead, Clock::time_point now) {
  std::lock_guard lk(mu_);
  for (auto it = live_.begin(); it != live_.end();) {
    bool gone = (it->second.local && dead(it->first)) || now - it->second.seen > std::chrono::seconds(15);
    if (!gone) {
      ++it;
      continue;
    }
    for (auto& [key, v] : it->second.series)
      if (v.kind != 1) add(retired_[key], v);
    it = live_.erase(it);
  }
}

size_t ReportedMetrics::processes() const {
  std::lock_guard lk(mu_);
  return live_.size();
}

std::vector<prometheus::MetricFamily> ReportedMetrics::Collect() const {
  std::map<Key, Value> total;
  {
    std::lock_guard lk(mu_);
    total = retired_;
    for (auto& [pid, p] : live_)
      for (auto& [key, v] : p.series) add(total[key], v);
  }
  std::map<std::string, prometheus::MetricFamily> families;
  for (auto& [key, v] : total) {
    auto& f = families[key.first];
    if (f.name.empty()) {
      f.name = key.first;
      f.help = v.help;
      f.type = v.kind == 0 ? prometheus::MetricType::Counter
               : v.kind == 1 ? prometheus::MetricType::Gauge
                             : prometheus::MetricType::Histogram;
    }
    prometheus::ClientMetric m;
    m.label.push_back({"node", node_});
    for (auto& [k, val] : key.second) m.label.push_back({k, val});
    if (v.kind == 0) m.counter.value = v.value;
    if (v.kind == 1) m.gauge.value = v.value;
    if (v.kind == 2) {
      m.histogram.sample_count = v.count;
      m.histogram.sample_sum = v.sum;
      uint64_t cumulative = 0;
      for (size_t i = 0; i < v.buckets.size(); ++i) {
        cumulative += v.buckets[i];
        m.histogram.bucket.push_back(
            {cumulative, i < v.bounds.size() ? v.bounds[i] : std::numeric_limits<double>::infinity()});
      }
    }
    f.metric.push_back(std::move(m));
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto& [name, f] : families) out.push_back(std::move(f));
  return out;
}

}  // namespace yard::sched
