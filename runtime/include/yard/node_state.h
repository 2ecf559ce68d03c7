// What the cluster says about one of its nodes, for programs that react to membership (an elastic
// training group lets go of what runs on a node being drained, so the drain can end).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace yard {

enum class NodeState {
  kUnknown,   // no such node (or it left long ago)
  kAlive,
  kDraining,  // `yard drain` (or the autoscaler) is emptying it: it takes no new work
  kDead,
};

// The node's state as the head records it in the control store. Needs yard::init. Thread-safe.
// Throws yard::Error when the control store cannot be reached.
NodeState node_state(const std::string& node_id);
const char* node_state_name(NodeState s);

// A node as the cluster knows it.
struct NodeInfo {
  std::string id;
  std::string address;   // its node manager's "host:port"
  std::string hostname;
  NodeState state = NodeState::kUnknown;
  // What it offers and what of it is free now (empty once it is dead).
  std::map<std::string, double> total, available;
};
// Every node the cluster has recorded, dead ones too, ordered by id. Needs yard::init.
// Thread-safe. Throws yard::Error when the control store cannot be reached.
std::vector<NodeInfo> nodes();

}  // namespace yard
