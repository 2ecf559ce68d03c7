#include "daemon.h"

#include "common/service.h"
#include "head/head_service.h"
#include "node/node_manager.h"
#include "sim/simulated_nodes.h"

namespace yard::sched {

namespace {

void fill(DaemonOptions& d, NodeOffer& offer, const StartOptions& o) {
  d.host = o.host;
  d.session_dir = o.session_dir;
  d.ready_fd = o.ready_fd;
  d.heartbeat_timeout_s = o.heartbeat_timeout_s;
  d.metrics_port = o.metrics_port;
  offer.num_cpus = o.num_cpus;
  offer.num_gpus = o.num_gpus;
  offer.resources = o.resources;
  offer.object_store_bytes = o.object_store_bytes;
}

HeadOptions head_options(const StartOptions& o) {
  HeadOptions h;
  fill(h, h, o);
  h.presence = o.embedded ? embedded_presence() : head_record_presence();
  h.port = o.port;
  h.redis_address = o.redis_address;
  h.control_replicas = o.control_replicas;
  h.dashboard_port = o.dashboard_port;
  h.standby_of = o.standby_of;
  if (!o.standby_of.empty()) h.standby_token = o.join_token;
  h.team_key_file = o.team_key_file;
  h.autoscaler_config = o.autoscaler_config;
  h.cluster_config = o.cluster_config;
  return h;
}

NodeOptions node_options(const StartOptions& o) {
  NodeOptions n;
  fill(n, n, o);
  if (o.head_node)
    n.presence = head_node_presence(o.embedded);
  else
    n.presence = o.embedded ? embedded_presence() : node_record_presence();
  n.role = o.head_node ? NodeRole::kHeadNode : NodeRole::kJoined;
  n.port = o.port;
  n.join_address = o.join_address;
  n.join_token = o.join_token;
  n.head_timeout_s = o.head_timeout_s;
  n.node_id = o.node_id;
  return n;
}

}  // namespace

int run_daemon(const StartOptions& opts) {
  take_stop_signals();
  if (opts.join_address.empty()) return HeadService(head_options(opts)).run();
  if (opts.simulate > 0) {
    SimulatedNodesOptions s;
    static_cast<NodeOptions&>(s) = node_options(opts);
    s.count = opts.simulate;
    return sim::SimulatedNodes(std::move(s)).run();
  }
  return NodeManager(node_options(opts)).run();
}

}  // namespace yard::sched
