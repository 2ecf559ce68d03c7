// The daemons `yard start` runs: the head service (with --head: the control store, jobs, actors,
// placement groups, failure detection; head/) and a node manager (on every node, the head's
// included: resources, workers, leases, hosted actors, job processes; node/).
#pragma once

#include <map>
#include <string>

namespace yard::sched {

struct DaemonOptions {
  std::string host = "127.0.0.1";
  int port = 6380;
  std::string redis_address;   // empty: start our own redis-server ("sentinel:...": a replicated one)
  // With --head: the control store's replicas the head starts (0: one Redis, no Sentinels).
  int control_replicas = 0;
  double num_cpus = 0;         // 0: hardware concurrency
  int num_gpus = -1;           // -1: the NVIDIA devices this machine has (/proc/driver/nvidia/gpus)
  std::map<std::string, double> resources;  // extra custom resources
  std::string session_dir;     // empty: a new one under $YARD_HOME
  bool embedded = false;       // started by yard::init(): no cluster record, dies with its parent
  int ready_fd = -1;           // "address token_file\n" (or "ERROR: ...\n") is written here
  // Joining an existing cluster instead of heading one: the head's address and the cluster token.
  std::string join_address;
  std::string join_token;
  bool head_node = false;      // the node manager the head service started beside itself
  // With --head --standby: the active head's address (the token in join_token). This head waits,
  // and takes the cluster over when the active head's lease runs out (head/head_lease.h).
  std::string standby_of;
  // With --head: the team key (common/credentials.h) read from this file instead of made for the
  // session: a standby on another machine, or a new cluster, accepts the credentials given before.
  std::string team_key_file;
  // A node whose heartbeat is older than this is dead (heartbeats go every timeout / 4).
  double heartbeat_timeout_s = 4;
  // A node manager that has not reached the cluster's control store for this long (the head and
  // its Redis are gone: the cluster was stopped, or its machine lost) stops itself and its
  // workers (0: it waits for ever). Long enough to ride out a head or Redis restart.
  double head_timeout_s = 60;
  // Bytes of objects the node's processes may hold in memory before they spill to disk
  // (0: 30% of the machine's memory).
  uint64_t object_store_bytes = 0;
  // Prometheus metrics served on this port of `host` (-1: none, 0: any free port). The head's
  // node manager serves on the next port (any free port when 0).
  int metrics_port = -1;
  // The head's dashboard on this port of `host` (0: any free port, -1: none).
  int dashboard_port = 0;
  // With join_address: this many simulated nodes in this process instead of one real node
  // (sim/simulated_nodes.h).
  int simulate = 0;
  // The head's autoscaler configuration (autoscale/config.h); empty: no autoscaler.
  std::string autoscaler_config;
  std::string cluster_config;  // --config: the job queue's teams (and node types, if any)
  // The id this node joins as (set by the autoscaler's node providers); empty: a random one.
  std::string node_id;
};

// The head service, or with join_address a node manager. Runs until SIGTERM/SIGINT or a shutdown
// request. Returns the process exit code.
int run_daemon(const DaemonOptions& opts);

}  // namespace yard::sched
