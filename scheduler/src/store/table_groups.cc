#include "store/tables.h"

#include <nlohmann/json.hpp>

#include "store/fields.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

using json = nlohmann::json;
using yard::sched::store::fields::text;

namespace yard::sched::store {

std::string Groups::key(const std::string& id) { return keys::placement_group(id); }

std::vector<std::string> Groups::fields_of(const GroupRecord& g) {
  return {key(g.id), "name", g.name, "job", g.job, "namespace", g.ns, "strategy", policy::name(g.strategy), "state", name(g.state),
          "bundles", json(g.bundles).dump(), "nodes", json(g.nodes).dump()};
}

void Groups::save(const GroupRecord& g) {
  auto args = fields_of(g);
  args.insert(args.begin(), "HSET");
  s_.cmd(args);
}

std::vector<std::string> Groups::ids() {
  std::vector<std::string> ids;
  std::string cursor = "0";
  const std::string prefix = key("");
  do {
    auto r = s_.cmd({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    cursor = r.at(0);
    for (auto& k : r.nested_strings(1)) ids.push_back(k.substr(prefix.size()));
  } while (cursor != "0");
  return ids;
}

std::optional<GroupRecord> Groups::get(const std::string& id) {
  auto f = s_.hgetall(key(id));
  auto state = parse_group_state(text(f, "state"));
  if (f.empty() || !state) return std::nullopt;
  GroupRecord g;
  g.id = id;
  g.name = text(f, "name");
  g.job = text(f, "job");
  g.ns = text(f, "namespace");
  if (g.ns.empty()) g.ns = g.job;
  g.strategy = policy::parse_bundle_strategy(text(f, "strategy")).value_or(policy::BundleStrategy::kPack);
  g.state = *state;
  try {
    g.bundles = json::parse(text(f, "bundles")).get<std::vector<Res>>();
    g.nodes = json::parse(text(f, "nodes")).get<std::vector<std::string>>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  g.nodes.resize(g.bundles.size());
  return g;
}

}  // namespace yard::sched::store
