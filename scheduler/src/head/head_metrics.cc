#include "head/head_metrics.h"

namespace yard::sched {

namespace {

GaugeTable::Rows rows(const std::string& label, const std::map<std::string, int>& m) {
  GaugeTable::Rows r;
  for (auto& [k, v] : m) r.push_back({{{label, k}}, double(v)});
  return r;
}

GaugeTable::Rows rows(const Res& m) {
  GaugeTable::Rows r;
  for (auto& [k, v] : m) r.push_back({{{"resource", k}}, v});
  return r;
}

}  // namespace

HeadMetrics::HeadMetrics(const std::string& host, int port, const std::string& token, const WebIdentity& tls)
    : endpoint_(host, port, token, tls),
      nodes_(endpoint_.registry(), "yard_nodes", "nodes by state (alive, draining, dead)"),
      actors_(endpoint_.registry(), "yard_actors", "actors by state and class"),
      groups_(endpoint_.registry(), "yard_placement_groups", "placement groups by state"),
      jobs_(endpoint_.registry(), "yard_jobs", "jobs by status"),
      total_(endpoint_.registry(), "yard_cluster_resources", "resources of the alive nodes (memory in bytes)"),
      avail_(endpoint_.registry(), "yard_cluster_resources_available", "resources of the alive nodes free now"),
      events_(prometheus::BuildCounter()
                  .Name("yard_events_total")
                  .Help("cluster events by type (actor_restarted, node_dead, ...)")
                  .Register(endpoint_.registry())),
      missed_(prometheus::BuildCounter()
                  .Name("yard_heartbeats_missed_total")
                  .Help("heartbeats a node did not renew within --heartbeat-timeout, by node")
                  .Register(endpoint_.registry())),
      reconnects_(prometheus::BuildCounter()
                      .Name("yard_control_store_reconnects_total")
                      .Help("times the head's connection to the control store was made again (a lost connection, a "
                            "failover to another primary)")
                      .Register(endpoint_.registry())
                      .Add({})),
      unacked_(prometheus::BuildCounter()
                   .Name("yard_control_store_unacknowledged_total")
                   .Help("turns of the head whose writes no replica of the control store acknowledged within 1 s")
                   .Register(endpoint_.registry())
                   .Add({})),
      process_(endpoint_.registry(), {{"node", "head"}}) {}

void HeadMetrics::update(const Sample& s) {
  nodes_.set(rows("state", s.nodes));
  GaugeTable::Rows a;
  for (auto& [key, n] : s.actors) a.push_back({{{"state", key.first}, {"class", key.second}}, double(n)});
  actors_.set(a);
  groups_.set(rows("state", s.groups));
  jobs_.set(rows("status", s.jobs));
  total_.set(rows(s.total));
  avail_.set(rows(s.avail));
  if (s.store_reconnects > reconnects_seen_) reconnects_.Increment(double(s.store_reconnects - reconnects_seen_));
  reconnects_seen_ = s.store_reconnects;
  process_.update();
}

void HeadMetrics::event(const std::string& type) { events_.Add({{"type", type}}).Increment(); }
void HeadMetrics::heartbeat_missed(const std::string& node_id) { missed_.Add({{"node_id", node_id}}).Increment(); }

}  // namespace yard::sched
