#include "policy/placement.h"
#include "policy/rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace yard::sched::policy {

const NodeState* ClusterView::find(const std::string& id) const {
  if (!at.empty()) {
    auto it = at.find(id);
    return it == at.end() ? nullptr : &nodes[it->second];
  }
  for (auto& n : nodes)
    if (n.id == id) return &n;
  return nullptr;
}

void ClusterView::place(const std::string& id, const Res& r) {
  const NodeState* n = find(id);
  if (!n) return;
  auto i = static_cast<size_t>(n - nodes.data());
  Res a = nodes[i].avail;
  sub(a, r);
  set_avail(i, std::move(a));
  set_actors(i, nodes[i].actors + 1);
}

void ClusterView::index() {
  keys.clear();
  std::map<std::string, size_t> col;
  for (auto& n : nodes)
    for (auto& [k, v] : n.total) col.emplace(k, 0);
  for (auto& [k, c] : col) {
    c = keys.size();
    keys.push_back(k);
  }
  total.assign(nodes.size() * keys.size(), 0);
  avail.assign(nodes.size() * keys.size(), 0);
  busy.assign(nodes.size(), 0);
  by_busy.clear();
  by_actors.clear();
  at.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (auto& [k, v] : nodes[i].total) total[i * keys.size() + col[k]] = v;
    at.emplace(nodes[i].id, i);
  }
  if (keys.empty()) return;
  for (size_t i = 0; i < nodes.size(); ++i) {
    by_busy.emplace(0, i);
    by_actors.emplace(nodes[i].actors, 0, i);
    set_avail(i, nodes[i].avail);
  }
}

void ClusterView::set_avail(size_t i, Res a) {
  nodes[i].avail = std::move(a);
  if (keys.empty()) return;
  double* row = avail.data() + i * keys.size();
  for (size_t c = 0; c < keys.size(); ++c) {
    auto it = nodes[i].avail.find(keys[c]);
    row[c] = it == nodes[i].avail.end() ? 0 : it->second;
  }
  double u = Rows(*this).utilisation(i);
  by_busy.erase({busy[i], i});
  by_actors.erase({nodes[i].actors, busy[i], i});
  busy[i] = u;
  by_busy.emplace(u, i);
  by_actors.emplace(nodes[i].actors, u, i);
}

void ClusterView::set_actors(size_t i, int n) {
  if (!keys.empty() && nodes[i].actors != n) {
    by_actors.erase({nodes[i].actors, busy[i], i});
    by_actors.emplace(n, busy[i], i);
  }
  nodes[i].actors = n;
}

std::optional<ActorStrategy> parse_actor_strategy(std::string_view s) {
  if (s.empty() || s == "DEFAULT") return ActorStrategy::kDefault;
  if (s == "SPREAD") return ActorStrategy::kSpread;
  return std::nullopt;
}

std::string infeasible_reason(const ClusterView& view, const Res& need) {
  std::string what;
  for (auto& [k, v] : need) {
    if (v <= 0) continue;
    double best = 0;
    for (auto& n : view.nodes)
      if (auto it = n.total.find(k); it != n.total.end()) best = std::max(best, it->second);
    if (v > best + 1e-9) {
      char b[160];
      std::snprintf(b, sizeof b, "%s%s: %g wanted, the largest node has %g", what.empty() ? "" : ", ", k.c_str(), v, best);
      what += b;
    }
  }
  if (what.empty()) what = "no single node has all of " + res_text(need);
  return what;
}

namespace {

// Hard or soft node affinity; nullopt when the request has none or a soft one that cannot be met
// (the other rules decide then).
std::optional<Decision> by_affinity(const ClusterView& view, const ActorRequest& req) {
  if (req.affinity_node.empty()) return std::nullopt;
  const NodeState* n = view.find(req.affinity_node);
  if (req.soft) {
    if (n && fits(req.resources, n->avail)) return Decision::placed(n->id);
    return std::nullopt;
  }
  if (!n) return Decision::infeasible("node " + req.affinity_node + " (asked for by node affinity) is not alive");
  if (!fits(req.resources, n->total))
    return Decision::infeasible("node " + req.affinity_node + " never has " + res_text(req.resources));
  return fits(req.resources, n->avail) ? Decision::placed(n->id) : Decision::wait();
}

constexpr double kSpillAt = 0.5;  // default: local first while the local node is under half busy

// An indexed view's nodes walked in the strategy's order, to the first with room now: the node a
// pass over all of them would pick. nullopt when none has room (the pass then tells waiting from
// infeasible).
std::optional<Decision> in_order(const ClusterView& view, const ActorRequest& req) {
  Rows rows(view);
  FlatNeed need(view, req.resources);
  if (need.impossible) return std::nullopt;
  auto room = [&](size_t i) { return need.fits(rows.total(i)) && need.fits(rows.avail(i)); };
  auto placed = [&](size_t i) { return Decision::placed(view.nodes[i].id); };
  if (req.strategy == ActorStrategy::kSpread) {  // fewest actors, then the least busy
    for (auto& [actors, u, i] : view.by_actors)
      if (room(i)) return placed(i);
    return std::nullopt;
  }
  auto local = view.at.find(req.local_node);
  bool local_room = local != view.at.end() && room(local->second);
  if (local_room && view.busy[local->second] < kSpillAt) return placed(local->second);
  for (auto& [u, i] : view.by_busy) {  // the least busy, the local node on a tie
    if (!room(i)) continue;
    if (local_room && std::abs(view.busy[local->second] - u) <= 1e-9) return placed(local->second);
    return placed(i);
  }
  return std::nullopt;
}

}  // namespace

// Walks an indexed view's order (in_order) when it can; else one pass over the nodes, each
// node's utilisation worked out once, nothing copied.
Decision place_actor(const ClusterView& view, const ActorRequest& req) {
  if (auto d = by_affinity(view, req)) return *d;
  if (!view.by_busy.empty())
    if (auto d = in_order(view, req)) return *d;
  Rows rows(view);
  std::optional<FlatNeed> flat;
  if (rows.on()) flat.emplace(view, req.resources);
  bool spread = req.strategy == ActorStrategy::kSpread;
  bool feasible = false;
  const NodeState* best = nullptr;
  double best_u = 0;
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    auto& n = view.nodes[i];
    double u;
    if (flat) {
      if (!flat->fits(rows.total(i))) continue;
      feasible = true;
      if (!flat->fits(rows.avail(i))) continue;
      u = rows.utilisation(i);
    } else {
      if (!fits(req.resources, n.total)) continue;
      feasible = true;
      if (!fits(req.resources, n.avail)) continue;
      u = utilisation(n.total, n.avail);
    }
    if (!spread && n.id == req.local_node && u < kSpillAt) return Decision::placed(n.id);
    bool better;
    if (!best)
      better = true;
    else if (spread)  // fewest actors, then the least busy
      better = n.actors < best->actors || (n.actors == best->actors && u < best_u);
    else  // the least busy, the local node on a tie
      better = u < best_u - 1e-9 || (std::abs(u - best_u) <= 1e-9 && n.id == req.local_node && best->id != req.local_node);
    if (better) {
      best = &n;
      best_u = u;
    }
  }
  if (!feasible) return Decision::infeasible(infeasible_reason(view, req.resources));
  if (!best) return Decision::wait();
  return Decision::placed(best->id);
}

std::string spill_target(const ClusterView& peers, const std::string& self, const Res& need, bool ever) {
  std::string best;
  double most = -1;
  for (auto& n : peers.nodes) {
    if (n.id == self || !fits(need, ever ? n.total : n.avail)) continue;
    auto it = n.avail.find("CPU");
    double cpu = it == n.avail.end() ? 0 : it->second;
    if (cpu > most) {
      most = cpu;
      best = n.id;
    }
  }
  return best;
}

}  // namespace yard::sched::policy
