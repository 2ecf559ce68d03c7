#include "node/node_metrics.h"

namespace yard::sched {

namespace {

prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const prometheus::Labels& node) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(node).Register(r).Add({});
}

prometheus::Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& node) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(node).Register(r).Add({});
}

GaugeTable::Rows by(const std::string& label, const Res& r) {
  GaugeTable::Rows rows;
  for (auto& [k, v] : r) rows.push_back({{{label, k}}, v});
  return rows;
}

}  // namespace

NodeMetrics::NodeMetrics(const std::string& host, int port, const std::string& token, const std::string& node_id,
                         const WebIdentity& tls)
    : endpoint_(host, port, token, tls),
      node_{{"node", node_id}},
      total_(endpoint_.registry(), "yard_node_resources", "resources this node offers (memory in bytes)", node_),
      avail_(endpoint_.registry(), "yard_node_resources_available", "resources of this node free now", node_),
      workers_(endpoint_.registry(), "yard_workers", "worker processes by state", node_),
      leases_waiting_(gauge(endpoint_.registry(), "yard_leases_waiting", "requests for workers waiting here", node_)),
      store_used_(gauge(endpoint_.registry(), "yard_object_store_used_bytes", "bytes of objects held in memory by this node's processes", node_)),
      store_limit_(gauge(endpoint_.registry(), "yard_object_store_limit_bytes", "bytes of objects kept in memory before spilling", node_)),
      spilled_bytes_(gauge(endpoint_.registry(), "yard_object_spilled_bytes", "bytes of objects spilled to disk now", node_)),
      spilled_objects_(gauge(endpoint_.registry(), "yard_objects_spilled", "objects spilled to disk now", node_)),
      workers_rss_(gauge(endpoint_.registry(), "yard_workers_resident_memory_bytes", "memory this node's worker processes hold", node_)),
      leases_granted_(counter(endpoint_.registry(), "yard_leases_granted_total", "requests for workers answered with workers", node_)),
      workers_granted_(counter(endpoint_.registry(), "yard_lease_workers_granted_total", "workers leased to task submitters", node_)),
      lease_wait_(prometheus::BuildHistogram()
                      .Name("yard_lease_wait_seconds")
                      .Help("how long a request for workers waited for its answer")
                      .Labels(node_)
                      .Register(endpoint_.registry())
                      .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                       0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})),
      process_(endpoint_.registry(), node_),
      reported_(std::make_shared<ReportedMetrics>(node_id)) {
  endpoint_.add(reported_);
}

void NodeMetrics::update(const Sample& s) {
  total_.set(by("resource", s.total));
  avail_.set(by("resource", s.avail));
  GaugeTable::Rows w;
  for (auto& [state, n] : s.workers) w.push_back({{{"state", state}}, double(n)});
  workers_.set(w);
  leases_waiting_.Set(double(s.leases_waiting));
  store_used_.Set(double(s.store_used));
  store_limit_.Set(double(s.store_limit));
  spilled_bytes_.Set(double(s.spilled_bytes));
  spilled_objects_.Set(double(s.spilled_objects));
  workers_rss_.Set(s.workers_rss);
  process_.update();
}

void NodeMetrics::lease_answered(double seconds, size_t workers) {
  lease_wait_.Observe(seconds);
  if (workers == 0) return;
  leases_granted_.Increment();
  workers_granted_.Increment(double(workers));
}

}  // namespace yard::sched
