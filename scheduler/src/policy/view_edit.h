// Changing a copy of a cluster view as a policy plans: room given back where a replica or a job
// leaves, room taken where a job is placed. For the queue's policies (queue.cc, preemption.cc).
#pragma once

#include <string>
#include <vector>

#include "policy/placement.h"

namespace yard::sched::policy {

// Adds `r` to the free room of `node` (taken back with sign -1); unknown nodes are ignored.
inline void give(ClusterView& v, const std::string& node, const Res& r, double sign = 1) {
  const NodeState* n = v.find(node);
  if (!n) return;
  auto i = static_cast<size_t>(n - v.nodes.data());
  Res a = v.nodes[i].avail;
  for (auto& [k, x] : r) a[k] += sign * x;
  v.set_avail(i, std::move(a));
}

// Takes a placed job's bundles (fixed parts first, then replicas, as place_job answers) from `v`.
inline void take_placed(ClusterView& v, const std::vector<Res>& fixed, const Res& replica,
                        const std::vector<std::string>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) give(v, nodes[i], i < fixed.size() ? fixed[i] : replica, -1);
}

}  // namespace yard::sched::policy
