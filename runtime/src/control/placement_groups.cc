// Placement groups as the control store records them (yard:pg:<id>, written by the head): listed,
// and found by name in a namespace or by id.
#include <nlohmann/json.hpp>

#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/yard.h"

namespace yard {

namespace {

PlacementStrategy strategy_of(const std::string& s) {
  if (s == "SPREAD") return PlacementStrategy::kSpread;
  if (s == "STRICT_PACK") return PlacementStrategy::kStrictPack;
  if (s == "STRICT_SPREAD") return PlacementStrategy::kStrictSpread;
  return PlacementStrategy::kPack;
}

// A record's fields as the group; nullopt when it is not a live group's (removed, unreadable).
std::optional<PlacementGroupInfo> info_of(const std::string& id, const std::vector<std::string>& f) {
  // f: name, job, strategy, state, bundles, nodes, namespace
  if (f.size() != 7 || f[3].empty() || f[3] == "REMOVED") return std::nullopt;
  PlacementGroupInfo g;
  g.id = id;
  g.name = f[0];
  g.job = f[1];
  g.name_space = f[6].empty() ? g.job : f[6];  // a record from before namespaces: its job's
  g.strategy = strategy_of(f[2]);
  g.state = f[3];
  auto bundles = nlohmann::json::parse(f[4], nullptr, false);
  auto nodes = nlohmann::json::parse(f[5], nullptr, false);
  if (!bundles.is_array() || !nodes.is_array()) return std::nullopt;
  for (auto& b : bundles) {
    Bundle r;
    for (auto& [k, v] : b.items())
      if (v.is_number()) r[k] = v.get<double>();
    g.bundles.push_back(std::move(r));
  }
  for (auto& n : nodes) g.nodes.push_back(n.is_string() ? n.get<std::string>() : std::string());
  g.nodes.resize(g.bundles.size());
  return g;
}

std::vector<PlacementGroupInfo> read_groups(const std::vector<std::string>& only_ids) {
  return detail::cluster_control()->run([&](detail::Redis& r) {
    const std::string prefix = keys::placement_group("");
    std::vector<std::string> ids = only_ids;
    if (ids.empty()) {
      std::string cursor = "0";
      do {
        auto rep = r.cmd({"SCAN", cursor, "MATCH", keys::glob_literal(prefix) + "*", "COUNT", "1000"});
        cursor = rep.at(0);
        for (auto& k : rep.nested_strings(1)) ids.push_back(k.substr(prefix.size()));
      } while (cursor != "0");
    }
    std::vector<std::vector<std::string>> cmds;
    for (auto& id : ids)
      cmds.push_back({"HMGET", keys::placement_group(id), "name", "job", "strategy", "state", "bundles", "nodes", "namespace"});
    auto reps = r.pipeline(cmds);
    std::vector<PlacementGroupInfo> out;
    for (size_t i = 0; i < ids.size(); ++i)
      if (auto g = info_of(ids[i], reps[i].strings())) out.push_back(std::move(*g));
    return out;
  });
}

}  // namespace

std::vector<PlacementGroupInfo> placement_groups() { return read_groups({}); }

std::optional<PlacementGroup> placement_group_by_id(const std::string& id) {
  if (id.empty()) return std::nullopt;
  auto found = read_groups({id});
  if (found.empty()) return std::nullopt;
  PlacementGroup g;
  g.id_ = id;
  g.bundles_ = found[0].bundles;
  g.created_ = std::make_shared<std::atomic<bool>>(false);
  return g;
}

std::optional<PlacementGroup> get_placement_group(const std::string& name, const std::string& name_space) {
  const std::string ns = name_space.empty() ? get_namespace() : name_space;
  for (auto& info : placement_groups())
    if (info.name == name && info.name_space == ns) return placement_group_by_id(info.id);
  return std::nullopt;
}

}  // namespace yard
