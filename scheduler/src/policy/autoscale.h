// The autoscaling policy: which nodes to start for the demand the cluster cannot meet now, and
// which idle nodes to stop. Pure: the autoscaler (autoscale/autoscaler.h) gathers the input from
// the head's view and carries out the decision through a node provider.
#pragma once

#include <string>
#include <vector>

#include "policy/res.h"

namespace yard::sched::policy {

// A kind of node the autoscaler may start: what each offers, and how many there may be.
struct NodeType {
  std::string name;
  Res resources;
  int min_nodes = 0;
  int max_nodes = 1;
};

// A node the autoscaling input knows about.
struct ScaleNode {
  std::string id;
  std::string type;        // the node type it was started as; "" for a node not started by the autoscaler
  bool launching = false;  // started, not joined yet: it offers its type's resources when it does
  bool stopping = false;   // being drained or stopped: offers nothing
  Res avail;               // joined: free now; launching: its type's totals
  double idle_s = 0;       // joined and running nothing for this long (0: busy)
};

// Something that waits for room: a pending actor, a placement-group bundle, a waiting lease.
struct Demand {
  Res need;
  std::string what;         // for status: "actor Counter", "group pg-1 bundle 0"
  bool own_node = false;    // must not share a new node with others of the same group (STRICT_SPREAD)
  std::string group;        // for own_node
};

struct ScaleInput {
  std::vector<NodeType> types;
  std::vector<ScaleNode> nodes;
  std::vector<Demand> pending;
  double idle_timeout_s = 60;
};

struct Launch {
  std::string type;
  std::string why;
};
struct Stop {
  std::string node;
  std::string why;
};
struct Unmet {
  std::string what;
  std::string why;
};

struct ScaleDecision {
  std::vector<Launch> launch;  // one per node to start
  std::vector<Stop> stop;
  std::vector<Unmet> unmet;    // demand no node type can take (none fits, or all at max_nodes)
};

// Pending demand goes first onto the free room of joined and launching nodes (it is placed there
// soon), then onto new nodes: for each, the smallest type that holds it and is below its
// max_nodes, packed first-fit. Every type is kept at its min_nodes. A node started by the
// autoscaler that has been idle for idle_timeout_s is stopped unless its type would fall below
// min_nodes or pending demand fits on it.
ScaleDecision autoscale(const ScaleInput& in);

// Whether some node type could ever hold `need` (a request the running nodes cannot hold then
// waits for a node rather than failing).
bool some_type_holds(const std::vector<NodeType>& types, const Res& need);

}  // namespace yard::sched::policy
