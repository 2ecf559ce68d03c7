// `yard start --address HEAD --simulate N`: N node managers in one process, for measuring and
// testing what the head and the control store do for a cluster of N machines.
//
// Each simulated node registers, offers its resources, heartbeats and answers requests on its own
// address over the same messages and the same control-store scripts as a real node (sim_node.h);
// it runs no worker processes: actors placed on it live in this process. Their heartbeats leave
// together, all nodes' records in one pipelined round trip per heartbeat period. Several such
// processes can join one head; killing one (kill -9) is the loss of all of its nodes.
#pragma once

#include <memory>
#include <vector>

#include "daemon.h"
#include "sim/sim_node.h"

namespace yard::sched::sim {

class SimulatedNodes {
 public:
  explicit SimulatedNodes(SimulatedNodesOptions o) : o_(std::move(o)) {}
  // Joins, serves until stopped (a signal, its parent gone, or every node asked to leave), and
  // takes its nodes out of the cluster. The process exit code.
  int run();

 private:
  void open_session();
  void join();
  void add_nodes();
  // Every node's record and heartbeat, in one round trip; nodes declared dead rejoin empty.
  void beat();
  void beat_locked();  // store_.mu held
  void leave_all();

  SimulatedNodesOptions o_;
  std::string token_, token_file_, log_dir_;
  std::string head_;  // the head that answered the join
  double start_time_ = 0;
  Res per_node_;
  SimStore store_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
};

}  // namespace yard::sched::sim
