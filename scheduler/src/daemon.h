// The daemons `yard start` runs: the head service (with --head: the control store, jobs, actors,
// placement groups, failure detection; head/), a node manager (on every node, the head's
// included: resources, workers, leases, hosted actors, job processes; node/), or simulated nodes
// (sim/). Each takes its own options; what `yard start` was told becomes the options of the one
// it starts (run_daemon).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/presence.h"

namespace yard::sched {

// What every daemon is given.
struct DaemonOptions {
  std::string host = "127.0.0.1";
  std::string session_dir;     // empty: a new one under $YARD_HOME
  int ready_fd = -1;           // "address token_file\n" (or "ERROR: ...\n") is written here
  // A node whose heartbeat is older than this is dead (heartbeats go every timeout / 4).
  double heartbeat_timeout_s = 4;
  // Prometheus metrics served on this port of `host` (-1: none, 0: any free port). The head's
  // node manager serves on the next port (any free port when 0).
  int metrics_port = -1;
  // How it was started: where it leaves word of itself, whether it dies with its parent.
  std::shared_ptr<const Presence> presence;
};

// What a node offers the cluster (a head gives it to the node manager it starts beside itself).
struct NodeOffer {
  double num_cpus = 0;         // 0: hardware concurrency
  int num_gpus = -1;           // -1: the NVIDIA devices this machine has (/proc/driver/nvidia/gpus)
  std::map<std::string, double> resources;  // extra custom resources
  // Bytes of objects the node's processes may hold in memory before they spill to disk
  // (0: 30% of the machine's memory).
  uint64_t object_store_bytes = 0;
};

struct HeadOptions : DaemonOptions, NodeOffer {
  int port = 6380;
  std::string redis_address;   // empty: start our own redis-server ("sentinel:...": a replicated one)
  // The control store's replicas the head starts (0: one Redis, no Sentinels).
  int control_replicas = 0;
  // The head's dashboard on this port of `host` (0: any free port, -1: none).
  int dashboard_port = 0;
  // A standby: the active head's address and the cluster's token. This head waits, and takes the
  // cluster over when the active head's lease runs out (head/head_lease.h).
  std::string standby_of, standby_token;
  // The team key (common/credentials.h) read from this file instead of made for the session: a
  // standby on another machine, or a new cluster, accepts the credentials given before.
  std::string team_key_file;
  // The head's autoscaler configuration (autoscale/config.h); empty: no autoscaler.
  std::string autoscaler_config;
  std::string cluster_config;  // --config: the job queue's teams (and node types, if any)
};

// What a node is to its cluster: the node manager the head started beside itself (it runs job
// programs in place, from the head's own files), or one that joined.
enum class NodeRole { kJoined, kHeadNode };

struct NodeOptions : DaemonOptions, NodeOffer {
  int port = 0;
  // The head's address and the cluster token.
  std::string join_address, join_token;
  // A node manager that has not reached the cluster's control store for this long (the head and
  // its Redis are gone: the cluster was stopped, or its machine lost) stops itself and its
  // workers (0: it waits for ever). Long enough to ride out a head or Redis restart.
  double head_timeout_s = 60;
  // The id this node joins as (set by the autoscaler's node providers); empty: a random one.
  std::string node_id;
  NodeRole role = NodeRole::kJoined;
};

// Simulated nodes in one process, each offering what `node` says (sim/simulated_nodes.h).
struct SimulatedNodesOptions : NodeOptions {
  int count = 0;
};

// Everything `yard start` was told (yard_main.cc fills it from the command line); see the
// options above for what each means.
struct StartOptions {
  std::string host = "127.0.0.1";
  int port = 6380;
  std::string redis_address;
  int control_replicas = 0;
  double num_cpus = 0;
  int num_gpus = -1;
  std::map<std::string, double> resources;
  std::string session_dir;
  bool embedded = false;       // --embedded: started by yard::init()
  int ready_fd = -1;
  std::string join_address, join_token;  // --address: a node that joins (its token)
  bool head_node = false;      // --head-node: the node manager beside the head service
  std::string standby_of;      // --head --standby (the token in join_token)
  std::string team_key_file;
  double heartbeat_timeout_s = 4;
  double head_timeout_s = 60;
  uint64_t object_store_bytes = 0;
  int metrics_port = -1;
  int dashboard_port = 0;
  int simulate = 0;            // --simulate N
  std::string autoscaler_config;
  std::string cluster_config;
  std::string node_id;
};

// The head service, or with a join address a node manager (or simulated nodes). Runs until
// SIGTERM/SIGINT or a shutdown request. Returns the process exit code.
int run_daemon(const StartOptions& opts);

}  // namespace yard::sched
