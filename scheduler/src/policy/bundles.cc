// Placement-group bundles (the policy of placement.h).
#include <cmath>
#include <map>

#include "policy/placement.h"

namespace yard::sched::policy {

std::optional<BundleStrategy> parse_bundle_strategy(std::string_view s) {
  if (s == "PACK") return BundleStrategy::kPack;
  if (s == "SPREAD") return BundleStrategy::kSpread;
  if (s == "STRICT_PACK") return BundleStrategy::kStrictPack;
  if (s == "STRICT_SPREAD") return BundleStrategy::kStrictSpread;
  return std::nullopt;
}

const char* name(BundleStrategy s) {
  switch (s) {
    case BundleStrategy::kPack: return "PACK";
    case BundleStrategy::kSpread: return "SPREAD";
    case BundleStrategy::kStrictPack: return "STRICT_PACK";
    case BundleStrategy::kStrictSpread: return "STRICT_SPREAD";
  }
  return "?";
}

namespace {

bool packs(BundleStrategy s) { return s == BundleStrategy::kPack || s == BundleStrategy::kStrictPack; }

// Against the nodes' totals: why no arrangement could ever hold the group, or nullopt.
std::optional<std::string> infeasible_group(const ClusterView& view, const GroupRequest& req) {
  const auto& B = req.bundles;
  for (size_t i = 0; i < B.size(); ++i) {
    bool any = false;
    for (auto& n : view.nodes) any |= fits(B[i], n.total);
    if (!any) return "bundle " + std::to_string(i) + " (" + res_text(B[i]) + ") fits no node: " + infeasible_reason(view, B[i]);
  }
  if (req.strategy == BundleStrategy::kStrictPack) {
    Res sum;
    for (auto& b : B) add(sum, b);
    bool any = false;
    for (auto& n : view.nodes) any |= fits(sum, n.total);
    if (!any) return "STRICT_PACK needs one node with " + res_text(sum) + ": " + infeasible_reason(view, sum);
  }
  if (req.strategy == BundleStrategy::kStrictSpread) {
    // A node per bundle: enough distinct nodes that can hold a bundle.
    size_t capable = 0;
    for (auto& n : view.nodes) {
      bool any = false;
      for (auto& b : B) any |= fits(b, n.total);
      capable += any;
    }
    if (capable < B.size())
      return "STRICT_SPREAD needs " + std::to_string(B.size()) + " nodes, the cluster has " + std::to_string(capable) +
             " that can hold a bundle";
  }
  return std::nullopt;
}

// The planning state of one request: free resources as bundles are planned, and how many of the
// group's bundles each node holds.
struct Plan {
  const ClusterView& view;
  const GroupRequest& req;
  std::map<std::string, Res> avail;
  std::map<std::string, int> used;
  std::vector<std::string> nodes;

  Plan(const ClusterView& v, const GroupRequest& r) : view(v), req(r) {
    for (auto& n : v.nodes) avail[n.id] = n.avail;
    nodes = r.placed;
    nodes.resize(r.bundles.size());
    for (auto& n : nodes)
      if (!n.empty()) ++used[n];
  }
  void put(size_t i, const std::string& node) {
    nodes[i] = node;
    sub(avail[node], req.bundles[i]);
    ++used[node];
  }
  // PACK, STRICT_PACK: every unplaced bundle on one node, when one can take them all.
  bool all_on_one() {
    Res sum;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].empty()) add(sum, req.bundles[i]);
    const NodeState* one = nullptr;
    for (auto& n : view.nodes) {
      if (!fits(sum, avail[n.id])) continue;
      if (req.strategy == BundleStrategy::kStrictPack && !used.empty() && !used.count(n.id)) continue;
      if (!one || used[n.id] > used[one->id] ||
          (used[n.id] == used[one->id] && utilisation(n.total, avail[n.id]) > utilisation(one->total, avail[one->id])))
        one = &n;
    }
    if (!one) return false;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].empty()) put(i, one->id);
    return true;
  }
  // Lower is better: packing prefers nodes with more of the group, then busier ones; spreading
  // the reverse; ties by id.
  bool better(const NodeState& x, const NodeState& y) {
    double ux = utilisation(x.total, avail[x.id]), uy = utilisation(y.total, avail[y.id]);
    if (packs(req.strategy)) {
      if (used[x.id] != used[y.id]) return used[x.id] > used[y.id];
      if (std::abs(ux - uy) > 1e-9) return ux > uy;
    } else {
      if (used[x.id] != used[y.id]) return used[x.id] < used[y.id];
      if (std::abs(ux - uy) > 1e-9) return ux < uy;
    }
    return x.id < y.id;
  }
  std::string choose(size_t i) {
    std::string fixed;
    for (auto& p : nodes)
      if (!p.empty()) fixed = p;
    const NodeState* best = nullptr;
    for (auto& n : view.nodes) {
      if (!fits(req.bundles[i], avail[n.id])) continue;
      if (req.strategy == BundleStrategy::kStrictSpread && used[n.id] > 0) continue;
      if (req.strategy == BundleStrategy::kStrictPack && !fixed.empty() && n.id != fixed) continue;
      if (!best || better(n, *best)) best = &n;
    }
    return best ? best->id : "";
  }
};

}  // namespace

GroupDecision place_bundles(const ClusterView& view, const GroupRequest& req) {
  if (req.check_feasible)
    if (auto why = infeasible_group(view, req)) return {Outcome::kInfeasible, {}, *why};
  Plan plan(view, req);
  if (packs(req.strategy) && !plan.all_on_one() && req.strategy == BundleStrategy::kStrictPack) return {};
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    if (!plan.nodes[i].empty()) continue;
    std::string n = plan.choose(i);
    if (n.empty()) return {};
    plan.put(i, n);
  }
  return {Outcome::kPlaced, plan.nodes, {}};
}

}  // namespace yard::sched::policy
