// What a node manager reports to Prometheus (labelled with the node's id): its resources, workers,
// leases and their wait, the node's object memory and spilling, its processes' CPU and memory.
#pragma once

#include <map>
#include <string>

#include "common/metrics_endpoint.h"
#include "node/reported_metrics.h"
#include "policy/res.h"

namespace yard::sched {

class NodeMetrics {
 public:
  struct Sample {
    Res total, avail;
    std::map<std::string, int> workers;  // by state
    size_t leases_waiting = 0;
    uint64_t store_used = 0, store_limit = 0, spilled_bytes = 0, spilled_objects = 0;
    double workers_rss = 0;  // bytes
  };
  // Throws yard::Error when it cannot listen.
  NodeMetrics(const std::string& host, int port, const std::string& token, const std::string& node_id,
              const WebIdentity& tls);
  const std::string& address() const { return endpoint_.address(); }
  void update(const Sample& s);
  // A lease was answered after waiting `seconds`, with `workers` workers.
  void lease_answered(double seconds, size_t workers);
  // What the node's processes report (tasks by function, user metrics).
  ReportedMetrics& reported() { return *reported_; }

 private:
  MetricsEndpoint endpoint_;
  prometheus::Labels node_;
  GaugeTable total_, avail_, workers_;
  prometheus::Gauge &leases_waiting_, &store_used_, &store_limit_, &spilled_bytes_, &spilled_objects_, &workers_rss_;
  prometheus::Counter& leases_granted_;
  prometheus::Counter& workers_granted_;
  prometheus::Histogram& lease_wait_;
  ProcessMetrics process_;
  std::shared_ptr<ReportedMetrics> reported_;
};

}  // namespace yard::sched
