// Placement-group bundles (the policy of placement.h).
#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>

#include "policy/placement.h"
#include "policy/rows.h"

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
  Rows rows(view);
  for (size_t i = 0; i < B.size(); ++i) {
    bool any = false;
    if (rows.on()) {
      FlatNeed need(view, B[i]);
      for (size_t k = 0; k < view.nodes.size() && !any; ++k) any = need.fits(rows.total(k));
    } else {
      for (auto& n : view.nodes) any |= fits(B[i], n.total);
    }
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

// The planning state of one request: the free resources of the nodes it puts bundles on (the
// others are read from the view, never copied), and how many of the group's bundles each node
// holds. Nodes are named by their index in the view.
struct Plan {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  const ClusterView& view;
  const GroupRequest& req;
  Rows rows;
  std::vector<FlatNeed> needs;  // each bundle by column, when the view has rows
  std::unordered_map<size_t, Res> changed;
  std::vector<int> used;
  bool any_used = false;
  std::vector<std::string> nodes;

  Plan(const ClusterView& v, const GroupRequest& r) : view(v), req(r), rows(v), used(v.nodes.size(), 0) {
    if (rows.on())
      for (auto& b : r.bundles) needs.emplace_back(v, b);
    nodes = r.placed;
    nodes.resize(r.bundles.size());
    for (auto& n : nodes) {
      if (n.empty()) continue;
      any_used = true;
      for (size_t k = 0; k < view.nodes.size(); ++k)
        if (view.nodes[k].id == n) ++used[k];
    }
  }
  const Res& avail(size_t k) const {
    auto c = changed.find(k);
    return c == changed.end() ? view.nodes[k].avail : c->second;
  }
  // Whether node k has room for `need` now (`flat`: the same request by column, or null).
  bool room(size_t k, const Res& need, const FlatNeed* flat) const {
    if (flat && !changed.count(k)) return flat->fits(rows.avail(k));
    return fits(need, avail(k));
  }
  double load(size_t k) const {
    if (rows.on() && !changed.count(k)) return rows.utilisation(k);
    return utilisation(view.nodes[k].total, avail(k));
  }
  void put(size_t i, size_t k) {
    nodes[i] = view.nodes[k].id;
    sub(changed.try_emplace(k, view.nodes[k].avail).first->second, req.bundles[i]);
    ++used[k];
    any_used = true;
  }
  // PACK, STRICT_PACK: every unplaced bundle on one node, when one can take them all.
  bool all_on_one() {
    Res sum;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].empty()) add(sum, req.bundles[i]);
    size_t one = kNone;
    std::optional<FlatNeed> flat;
    if (rows.on()) flat.emplace(view, sum);
    for (size_t k = 0; k < view.nodes.size(); ++k) {
      if (!room(k, sum, flat ? &*flat : nullptr)) continue;
      if (req.strategy == BundleStrategy::kStrictPack && any_used && used[k] == 0) continue;
      if (one == kNone || used[k] > used[one] || (used[k] == used[one] && load(k) > load(one))) one = k;
    }
    if (one == kNone) return false;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].empty()) put(i, one);
    return true;
  }
  // Lower is better: packing prefers nodes with more of the group, then busier ones; spreading
  // the reverse; ties by id.
  bool better(size_t x, size_t y) const {
    if (used[x] != used[y]) return packs(req.strategy) ? used[x] > used[y] : used[x] < used[y];
    double ux = load(x), uy = load(y);
    if (std::abs(ux - uy) > 1e-9) return packs(req.strategy) ? ux > uy : ux < uy;
    return view.nodes[x].id < view.nodes[y].id;
  }
  size_t choose(size_t i) const {
    std::string fixed;
    for (auto& p : nodes)
      if (!p.empty()) fixed = p;
    size_t best = kNone;
    const FlatNeed* flat = needs.empty() ? nullptr : &needs[i];
    for (size_t k = 0; k < view.nodes.size(); ++k) {
      if (!room(k, req.bundles[i], flat)) continue;
      if (req.strategy == BundleStrategy::kStrictSpread && used[k] > 0) continue;
      if (req.strategy == BundleStrategy::kStrictPack && !fixed.empty() && view.nodes[k].id != fixed) continue;
      if (best == kNone || better(k, best)) best = k;
    }
    return best;
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
    size_t k = plan.choose(i);
    if (k == Plan::kNone) return {};
    plan.put(i, k);
  }
  return {Outcome::kPlaced, plan.nodes, {}};
}

}  // namespace yard::sched::policy
