// What the head service reports to Prometheus: the cluster's nodes, actors, placement groups and
// jobs by state, its resources, and its events (actor restarts, nodes declared dead...) as
// counters. Set from the head's parts once a second, on its I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/metrics_endpoint.h"
#include "policy/res.h"

namespace yard::sched {

class HeadMetrics {
 public:
  struct Sample {
    std::map<std::string, int> nodes;                                 // by state
    std::map<std::pair<std::string, std::string>, int> actors;        // by (state, class)
    std::map<std::string, int> groups, jobs;                          // by state, by status
    Res total, avail;                                                 // of the alive nodes
    uint64_t store_reconnects = 0;  // the head's connection to the control store made again, so far
  };
  // Throws yard::Error when it cannot listen.
  HeadMetrics(const std::string& host, int port, const std::string& token, const WebIdentity& tls);
  const std::string& address() const { return endpoint_.address(); }
  void update(const Sample& s);
  // An event the head published ({"type": ...}).
  void event(const std::string& type);
  // A node's heartbeat expired before it renewed it (the failure detector saw it silent).
  void heartbeat_missed(const std::string& node_id);
  // A turn's writes that no replica of the control store acknowledged in time.
  void unacknowledged() { unacked_.Increment(); }

 private:
  MetricsEndpoint endpoint_;
  GaugeTable nodes_, actors_, groups_, jobs_, total_, avail_;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Family<prometheus::Counter>& missed_;
  prometheus::Counter& reconnects_;  // by the difference from the last sample
  prometheus::Counter& unacked_;
  uint64_t reconnects_seen_ = 0;
  ProcessMetrics process_;
};

}  // namespace yard::sched
