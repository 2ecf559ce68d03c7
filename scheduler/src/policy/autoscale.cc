#include "policy/autoscale.h"

#include <algorithm>
#include <map>
#include <set>

namespace yard::sched::policy {

namespace {

struct Bin {
  std::string node;  // "" for a node this decision starts
  Res free;
  std::set<std::string> groups;  // STRICT_SPREAD groups with a bundle here
  bool used = false;             // pending demand was put here
};

bool takes(Bin& b, const Demand& d) {
  if (!fits(d.need, b.free)) return false;
  if (d.own_node && !d.group.empty() && b.groups.count(d.group)) return false;
  sub(b.free, d.need);
  if (d.own_node) b.groups.insert(d.group);
  b.used = true;
  return true;
}

// How big a type is: each resource as a fraction of the largest amount any type offers of it,
// summed. The smallest type that holds a demand wastes the least.
double size_of(const NodeType& t, const std::map<std::string, double>& largest) {
  double s = 0;
  for (auto& [k, v] : t.resources) {
    auto it = largest.find(k);
    if (it != largest.end() && it->second > 0) s += v / it->second;
  }
  return s;
}

std::string type_names(const std::vector<const NodeType*>& ts) {
  std::string out;
  for (auto* t : ts) out += (out.empty() ? "" : ", ") + t->name;
  return out;
}

}  // namespace

bool some_type_holds(const std::vector<NodeType>& types, const Res& need) {
  return std::any_of(types.begin(), types.end(),
                     [&](const NodeType& t) { return t.max_nodes > 0 && fits(need, t.resources); });
}

ScaleDecision autoscale(const ScaleInput& in) {
  ScaleDecision out;
  std::map<std::string, double> largest;
  for (auto& t : in.types)
    for (auto& [k, v] : t.resources) largest[k] = std::max(largest[k], v);
  std::map<std::string, int> count;
  std::vector<Bin> bins;
  std::map<std::string, size_t> bin_of;
  for (auto& n : in.nodes) {
    if (n.stopping) continue;
    if (!n.type.empty()) ++count[n.type];
    bin_of[n.id] = bins.size();
    bins.push_back({n.id, n.avail, {}, false});
  }

  for (auto& d : in.pending) {
    bool placed = false;
    for (auto& b : bins)
      if (takes(b, d)) {
        placed = true;
        break;
      }
    if (placed) continue;
    std::vector<const NodeType*> holding, room;
    for (auto& t : in.types)
      if (t.max_nodes > 0 && fits(d.need, t.resources)) {
        holding.push_back(&t);
        if (count[t.name] < t.max_nodes) room.push_back(&t);
      }
    if (holding.empty()) {
      out.unmet.push_back({d.what, "no node type offers " + res_text(d.need)});
      continue;
    }
    if (room.empty()) {
      out.unmet.push_back({d.what, "every node type that holds it is at its max_nodes (" + type_names(holding) + ")"});
      continue;
    }
    auto* t = *std::min_element(room.begin(), room.end(), [&](const NodeType* a, const NodeType* b) {
      return size_of(*a, largest) < size_of(*b, largest);
    });
    ++count[t->name];
    Bin b{"", t->resources, {}, false};
    takes(b, d);
    bins.push_back(std::move(b));
    out.launch.push_back({t->name, "for " + d.what + " (" + res_text(d.need) + ")"});
  }

  for (auto& t : in.types)
    while (count[t.name] < t.min_nodes) {
      ++count[t.name];
      out.launch.push_back({t.name, "min_nodes of " + t.name + " is " + std::to_string(t.min_nodes)});
    }

  std::map<std::string, int> min_of;
  for (auto& t : in.types) min_of[t.name] = t.min_nodes;
  for (auto& n : in.nodes) {
    if (n.type.empty() || n.launching || n.stopping || n.idle_s < in.idle_timeout_s) continue;
    if (bins[bin_of[n.id]].used || count[n.type] <= min_of[n.type]) continue;
    --count[n.type];
    out.stop.push_back({n.id, "idle for " + std::to_string(static_cast<long>(n.idle_s)) + " s (timeout " +
                                  std::to_string(static_cast<long>(in.idle_timeout_s)) + " s)"});
  }
  return out;
}

}  // namespace yard::sched::policy
