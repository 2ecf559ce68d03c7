#include "autoscale/config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace yard::sched {

namespace {

// What went wrong, where: "cluster.toml: node_types.gpu.max_nodes: must be a whole number".
struct Bad {
  std::string why;
};

std::string at(const std::string& file, const std::string& key, const std::string& why) {
  return file + ": " + key + ": " + why;
}

void known_keys(const toml::table& t, const std::set<std::string>& keys, const std::string& where) {
  for (auto&& [k, v] : t) {
    std::string key(k.str());
    if (!keys.count(key)) {
      std::string list;
      for (auto& x : keys) list += (list.empty() ? "" : ", ") + x;
      throw Bad{at("", where.empty() ? key : where + "." + key, "unknown key (known here: " + list + ")")};
    }
  }
}

double number(const toml::node& n, const std::string& key, double min) {
  auto v = n.value<double>();
  if (!v || !(n.is_integer() || n.is_floating_point())) throw Bad{at("", key, "must be a number")};
  if (*v < min) throw Bad{at("", key, "must be at least " + std::to_string(static_cast<long>(min)))};
  return *v;
}

int whole(const toml::node& n, const std::string& key, int min) {
  if (!n.is_integer()) throw Bad{at("", key, "must be a whole number")};
  auto v = n.value<int64_t>().value_or(0);
  if (v < min || v > 100000) throw Bad{at("", key, "must be between " + std::to_string(min) + " and 100000")};
  return static_cast<int>(v);
}

std::string text(const toml::node& n, const std::string& key) {
  if (!n.is_string()) throw Bad{at("", key, "must be a string")};
  return std::string(*n.value<std::string>());
}

policy::NodeType node_type(const std::string& name, const toml::node& n) {
  std::string where = "node_types." + name;
  bool plain = !name.empty() && name.size() <= 32 &&
               std::all_of(name.begin(), name.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'; });
  if (!plain) throw Bad{at("", where, "a node type's name is 1 to 32 of a-z, 0-9 and _")};
  if (!n.is_table()) throw Bad{at("", where, "must be a table ([" + where + "])")};
  auto& t = *n.as_table();
  known_keys(t, {"cpus", "gpus", "resources", "min_nodes", "max_nodes"}, where);
  policy::NodeType nt;
  nt.name = name;
  if (auto c = t.get("cpus")) nt.resources["CPU"] = number(*c, where + ".cpus", 0);
  if (auto g = t.get("gpus")) nt.resources["GPU"] = whole(*g, where + ".gpus", 0);
  if (auto r = t.get("resources")) {
    if (!r->is_table()) throw Bad{at("", where + ".resources", "must be a table of numbers, e.g. { special = 1 }")};
    for (auto&& [k, v] : *r->as_table()) {
      std::string rk(k.str());
      if (rk == "CPU" || rk == "GPU")
        throw Bad{at("", where + ".resources." + rk, "set it with " + std::string(rk == "CPU" ? "cpus" : "gpus"))};
      nt.resources[rk] = number(v, where + ".resources." + rk, 0);
    }
  }
  for (auto it = nt.resources.begin(); it != nt.resources.end();)
    it = it->second > 0 ? std::next(it) : nt.resources.erase(it);
  if (nt.resources.empty()) throw Bad{at("", where, "offers nothing (give it cpus, gpus or resources)")};
  if (auto m = t.get("min_nodes")) nt.min_nodes = whole(*m, where + ".min_nodes", 0);
  if (auto m = t.get("max_nodes")) nt.max_nodes = whole(*m, where + ".max_nodes", 1);
  if (nt.min_nodes > nt.max_nodes)
    throw Bad{at("", where + ".min_nodes",
                 "min_nodes " + std::to_string(nt.min_nodes) + " is above max_nodes " + std::to_string(nt.max_nodes))};
  return nt;
}

Res resource_table(const toml::node& n, const std::string& where) {
  if (!n.is_table()) throw Bad{at("", where, "must be a table of numbers, e.g. { CPU = 4, GPU = 1 }")};
  Res r;
  for (auto&& [k, v] : *n.as_table()) r[std::string(k.str())] = number(v, where + "." + std::string(k.str()), 0);
  return r;
}

policy::TeamQuota team(const std::string& name, const toml::node& n) {
  std::string where = "teams." + name;
  bool plain = !name.empty() && name.size() <= 32 &&
               std::all_of(name.begin(), name.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'; });
  if (!plain) throw Bad{at("", where, "a team's name is 1 to 32 of a-z, 0-9, _ and -")};
  if (!n.is_table()) throw Bad{at("", where, "must be a table ([" + where + "])")};
  auto& t = *n.as_table();
  known_keys(t, {"weight", "max_priority", "guarantee", "ceiling", "max_queued"}, where);
  policy::TeamQuota q;
  q.name = name;
  if (auto v = t.get("weight")) q.weight = number(*v, where + ".weight", 0);
  if (auto v = t.get("max_priority")) q.max_priority = whole(*v, where + ".max_priority", 0);
  if (auto v = t.get("max_queued")) q.max_queued = whole(*v, where + ".max_queued", 0);
  if (auto v = t.get("guarantee")) q.guarantee = resource_table(*v, where + ".guarantee");
  if (auto v = t.get("ceiling")) q.ceiling = resource_table(*v, where + ".ceiling");
  if (!q.ceiling.empty())
    for (auto& [k, g] : q.guarantee)
      if (g > 0 && (!q.ceiling.count(k) || q.ceiling.at(k) < g))
        throw Bad{at("", where + ".guarantee." + k, "is above the team's ceiling of " + k)};
  return q;
}

void read_queue(const toml::table& root, AutoscaleConfig& c) {
  if (auto q = root.get("queue")) {
    if (!q->is_table()) throw Bad{at("", "queue", "must be a table ([queue])")};
    auto& t = *q->as_table();
    known_keys(t, {"starvation_s", "usage_half_life_s", "stop_grace_s", "min_run_s"}, "queue");
    if (auto v = t.get("starvation_s")) c.starvation_s = number(*v, "queue.starvation_s", 0);
    if (auto v = t.get("usage_half_life_s")) c.usage_half_life_s = number(*v, "queue.usage_half_life_s", 1);
    if (auto v = t.get("stop_grace_s")) c.stop_grace_s = number(*v, "queue.stop_grace_s", 1);
    if (auto v = t.get("min_run_s")) c.min_run_s = number(*v, "queue.min_run_s", 0);
  }
  if (auto ts = root.get("teams")) {
    if (!ts->is_table()) throw Bad{at("", "teams", "must be tables ([teams.NAME])")};
    for (auto&& [k, v] : *ts->as_table()) c.teams.push_back(team(std::string(k.str()), v));
  }
}

void read_scheduling(const toml::node& n, AutoscaleConfig& c) {
  if (!n.is_table()) throw Bad{at("", "scheduling", "must be a table ([scheduling])")};
  auto& t = *n.as_table();
  known_keys(t, {"infeasible"}, "scheduling");
  if (auto v = t.get("infeasible")) {
    auto mode = text(*v, "scheduling.infeasible");
    if (mode != "wait" && mode != "fail")
      throw Bad{at("", "scheduling.infeasible", "'" + mode + "' is not a choice (wait or fail)")};
    c.infeasible_fails = mode == "fail";
  }
}

void read_local(const toml::node& n, AutoscaleConfig& c) {
  if (!n.is_table()) throw Bad{at("", "local", "must be a table ([local])")};
  auto& t = *n.as_table();
  known_keys(t, {"network_namespaces"}, "local");
  if (auto v = t.get("network_namespaces")) {
    if (!v->is_boolean()) throw Bad{at("", "local.network_namespaces", "must be true or false")};
    c.local.network_namespaces = v->as_boolean()->get();
  }
}

void read_slurm(const toml::node& n, AutoscaleConfig& c) {
  if (!n.is_table()) throw Bad{at("", "slurm", "must be a table ([slurm])")};
  auto& t = *n.as_table();
  known_keys(t, {"partition", "time_limit", "notice_s", "extra_args"}, "slurm");
  if (auto v = t.get("notice_s")) c.slurm.notice_s = number(*v, "slurm.notice_s", 0);
  if (auto p = t.get("partition")) c.slurm.partition = text(*p, "slurm.partition");
  if (auto p = t.get("time_limit")) c.slurm.time_limit = text(*p, "slurm.time_limit");
  if (auto a = t.get("extra_args")) {
    if (!a->is_array()) throw Bad{at("", "slurm.extra_args", "must be an array of strings")};
    for (auto& x : *a->as_array()) c.slurm.extra_args.push_back(text(x, "slurm.extra_args"));
  }
}

}  // namespace

Result<AutoscaleConfig> parse_autoscale_config(const std::string& content, const std::string& file, bool need_node_types) {
  toml::table root;
  try {
    root = toml::parse(content, file);
  } catch (const toml::parse_error& e) {
    return Result<AutoscaleConfig>::fail(file + ":" + std::to_string(e.source().begin.line) + ": " +
                                         std::string(e.description()));
  }
  AutoscaleConfig c;
  c.file = file;
  try {
    known_keys(root, {"provider", "idle_timeout_s", "launch_timeout_s", "local", "slurm", "node_types", "queue", "teams",
                      "scheduling"}, "");
    read_queue(root, c);
    if (auto s = root.get("scheduling")) read_scheduling(*s, c);
    if (auto p = root.get("provider")) c.provider = text(*p, "provider");
    if (c.provider != "local" && c.provider != "slurm")
      throw Bad{at("", "provider", "'" + c.provider + "' is not a provider (local or slurm)")};
    if (auto v = root.get("idle_timeout_s")) c.idle_timeout_s = number(*v, "idle_timeout_s", 1);
    if (auto v = root.get("launch_timeout_s")) c.launch_timeout_s = number(*v, "launch_timeout_s", 1);
    if (auto s = root.get("slurm")) read_slurm(*s, c);
    if (auto l = root.get("local")) read_local(*l, c);
    if (c.provider != "local" && root.get("local"))
      throw Bad{at("", "local", "is for provider = \"local\" (this file's provider is " + c.provider + ")")};
    auto types = root.get("node_types");
    if (!types && !need_node_types) return Result<AutoscaleConfig>::ok(std::move(c));
    if (!types || !types->is_table() || types->as_table()->empty())
      throw Bad{at("", "node_types", "at least one node type is needed ([node_types.NAME] with cpus, gpus or resources)")};
    for (auto&& [k, v] : *types->as_table()) c.types.push_back(node_type(std::string(k.str()), v));
  } catch (const Bad& b) {
    return Result<AutoscaleConfig>::fail(file + b.why);
  }
  return Result<AutoscaleConfig>::ok(std::move(c));
}

Result<AutoscaleConfig> read_autoscale_config(const std::string& path, bool need_node_types) {
  std::ifstream f(path);
  if (!f) return Result<AutoscaleConfig>::fail(path + ": cannot be read");
  std::stringstream s;
  s << f.rdbuf();
  return parse_autoscale_config(s.str(), path, need_node_types);
}

}  // namespace yard::sched
