// What a spot notice on a node means for the admitted jobs with parts there (queue.h): leave above
// MIN, move at MIN when the pool has room elsewhere, otherwise stop and requeue.
#include <algorithm>

#include "policy/queue.h"
#include "policy/view_edit.h"

namespace yard::sched::policy {

NoticePlan plan_notice(const QueueInput& in, const std::string& node) {
  NoticePlan plan;
  // Room elsewhere: what is free or being freed, without the noticed node.
  ClusterView elsewhere = soon_view(in);
  if (const NodeState* n = elsewhere.find(node)) {
    auto i = static_cast<size_t>(n - elsewhere.nodes.data());
    elsewhere.set_avail(i, Res{});
  }
  for (auto& r : in.running) {
    if (r.stopping) continue;
    std::vector<std::string> kept = r.replica_nodes;  // less those already asked to leave
    for (auto& gone : r.releasing)
      if (auto it = std::find(kept.begin(), kept.end(), gone); it != kept.end()) kept.erase(it);
    int there = static_cast<int>(std::count(kept.begin(), kept.end(), node));
    bool fixed_there = std::find(r.fixed_nodes.begin(), r.fixed_nodes.end(), node) != r.fixed_nodes.end();
    if (there == 0 && !fixed_there) continue;
    if (fixed_there) {
      plan.stop.push_back(r.id);
      continue;
    }
    int above_min = static_cast<int>(kept.size()) - r.shape.min;
    int leave = std::clamp(above_min, 0, there), move = there - leave;
    if (move > 0) {
      JobShape one{{}, r.shape.replica, move, move, r.shape.strategy};
      GroupDecision d = place_job(elsewhere, one, move);
      if (d.outcome != Outcome::kPlaced) {
        plan.stop.push_back(r.id);
        continue;
      }
      take_placed(elsewhere, {}, r.shape.replica, d.nodes);
      plan.move.push_back({r.id, std::vector<std::string>(static_cast<size_t>(move), node), d.nodes});
    }
    if (leave > 0) plan.leave.push_back({r.id, VictimKind::kShrink, std::vector<std::string>(static_cast<size_t>(leave), node), ""});
  }
  return plan;
}

}  // namespace yard::sched::policy
