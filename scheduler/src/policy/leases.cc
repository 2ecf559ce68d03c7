#include "policy/leases.h"

#include <vector>

namespace yard::sched::policy {

namespace {

LeaseRoute elsewhere(std::string node, bool used_turn = false) {
  return {LeaseRoute::Kind::kElsewhere, std::move(node), {}, used_turn};
}
LeaseRoute infeasible(std::string why) { return {LeaseRoute::Kind::kInfeasible, {}, std::move(why), false}; }

// "no node can run a task that needs GPU: 4 (GPU: 4 wanted, the largest node has 2)"
LeaseRoute nowhere(const ClusterView& peers, const NodeState& self, const Res& need) {
  ClusterView all;
  all.nodes = peers.nodes;
  if (!peers.find(self.id)) all.nodes.push_back(self);
  return infeasible("no node can run a task that needs " + res_text(need) + " (" + infeasible_reason(all, need) + ")");
}

}  // namespace

LeaseRoute route_lease(const ClusterView& peers, const NodeState& self, const LeaseRequest& req, size_t turn) {
  bool away = !req.affinity_node.empty() && req.affinity_node != self.id;
  if (!req.spilled && (away || req.spread)) {
    if (away) {
      if (peers.find(req.affinity_node)) return elsewhere(req.affinity_node);
      if (!req.soft) return infeasible("node " + req.affinity_node + " (asked for by node affinity) is not alive");
    } else if (req.affinity_node.empty()) {
      // SPREAD: round the nodes that have room now, this one included ("" stands for it).
      std::vector<std::string> room;
      if (fits(req.need, self.avail)) room.push_back("");
      for (auto& n : peers.nodes)
        if (n.id != self.id && fits(req.need, n.avail)) room.push_back(n.id);
      if (!room.empty()) {
        auto& pick = room[turn % room.size()];
        if (!pick.empty()) return elsewhere(pick, true);
        return {LeaseRoute::Kind::kHere, {}, {}, true};
      }
    }
  }
  if (!fits(req.need, self.total)) {
    // This node can never serve it: another node whose totals hold it, or a clear error.
    std::string target = req.spilled ? std::string() : spill_target(peers, self.id, req.need, true);
    if (!target.empty()) return elsewhere(target);
    return nowhere(peers, self, req.need);
  }
  return {};
}

}  // namespace yard::sched::policy
