// Task leases: where a node manager sends a request for workers before it serves it itself.
// Pure, like placement.h: a picture of the nodes in, a route out.
#pragma once

#include <string>

#include "policy/placement.h"

namespace yard::sched::policy {

struct LeaseRequest {
  Res need;                   // per worker
  std::string affinity_node;  // empty: none
  bool soft = false;          // affinity is a preference
  bool spread = false;        // SPREAD: round the nodes with room
  bool spilled = false;       // already sent here by another node: never sent on again
};

struct LeaseRoute {
  enum class Kind { kHere, kElsewhere, kInfeasible };
  Kind kind = Kind::kHere;
  std::string node;  // kElsewhere
  std::string why;   // kInfeasible
  bool used_turn = false;  // SPREAD took the next turn of the rotation
};

// `peers`: the other alive nodes (this one may be among them: it is skipped); `self`: this node.
// Hard affinity to another node goes there (infeasible when it is not alive); soft affinity there
// when alive, else here. SPREAD takes turn `turn` among the nodes with room now (this one
// included). A request this node's totals can never hold goes to a node whose totals can (unless
// it was spilled here already), else it is infeasible with the reason. Everything else is served
// here.
LeaseRoute route_lease(const ClusterView& peers, const NodeState& self, const LeaseRequest& req, size_t turn);

}  // namespace yard::sched::policy
