#include "store/tables.h"

#include <cstdlib>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"
#include "resources.h"
#include "yard/errors.h"

using json = nlohmann::json;

namespace yard::sched::store {

namespace {

// The key schema is yard/internal/keys.h's; these are its names here.
const std::string kCluster = keys::cluster();
const std::string kNodes = keys::nodes();
const std::string kJobs = keys::jobs();
const std::string kJobCounter = keys::job_counter();
const std::string kActors = keys::actors();
const std::string kNodesVersion = keys::nodes_version();
const std::string kActorNames = keys::actor_names();
const std::string kEvents = keys::events();
const std::string kEventLog = keys::event_log();
const std::string kDemand = keys::demand();
std::string node_key(const std::string& id) { return keys::node(id); }
std::string heartbeat_key(const std::string& id) { return keys::heartbeat(id); }
std::string job_key(const std::string& id) { return keys::job(id); }
std::string actor_key(const std::string& id) { return keys::actor(id); }
std::string spec_key(const std::string& id) { return keys::actor_spec(id); }

// A field as a number; `otherwise` when absent or not a number.
double num(const std::map<std::string, std::string>& f, const char* k, double otherwise = 0) {
  auto it = f.find(k);
  if (it == f.end() || it->second.empty()) return otherwise;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end && *end == '\0' ? v : otherwise;
}
std::string text(const std::map<std::string, std::string>& f, const char* k) {
  auto it = f.find(k);
  return it == f.end() ? std::string() : it->second;
}

Res res_of(const std::vector<std::string>& kv) {
  Res out;
  for (size_t k = 0; k + 1 < kv.size(); k += 2) {
    char* end = nullptr;
    double v = std::strtod(kv[k + 1].c_str(), &end);
    if (end && *end == '\0') out[kv[k]] = v;
  }
  return out;
}

}  // namespace

// ---- the cluster ----------------------------------------------------------------------------

void Tables::put_cluster(const std::string& address, const std::string& session_dir, const std::string& log_dir,
                         double start_time) {
  cmd({"HSET", kCluster, "address", address, "session_dir", session_dir, "log_dir", log_dir, "start_time",
          std::to_string(start_time)});
}

void Tables::set_head_node(const std::string& id) { cmd({"HSET", kCluster, "head_node", id}); }
void Tables::set_head_metrics(const std::string& address) { cmd({"HSET", kCluster, "metrics", address}); }
void Tables::set_dashboard(const std::string& url) { cmd({"HSET", kCluster, "dashboard", url}); }

std::map<std::string, std::string> Tables::cluster() { return hgetall(kCluster); }

void Tables::set_autoscale_types(const std::string& json) {
  if (json.empty()) cmd({"HDEL", kCluster, "autoscale_types"});
  else cmd({"HSET", kCluster, "autoscale_types", json});
}

std::string Tables::autoscale_types() {
  auto r = cmd({"HGET", kCluster, "autoscale_types"});
  return r.is_nil() ? std::string() : r.str();
}

void Tables::set_lease_demand(const std::string& node, const std::string& json) {
  if (json.empty()) cmd({"HDEL", kDemand, node});
  else cmd({"HSET", kDemand, node, json});
}

std::map<std::string, std::string> Tables::lease_demand() { return hgetall(kDemand); }

// ---- nodes ----------------------------------------------------------------------------------

std::vector<std::string> Tables::node_ids() { return cmd({"SMEMBERS", kNodes}).strings(); }

// Each of these is one round trip; the commands run in the order given.
void Tables::add_node(const std::string& id, const std::string& role) {
  run_all({{"HSET", node_key(id), "role", role, "state", name(NodeState::kAlive)},
           {"SADD", kNodes, id},
           {"INCR", kNodesVersion}});
}

void Tables::remove_node(const std::string& id) {
  run_all({{"SREM", kNodes, id}, {"DEL", heartbeat_key(id)}, {"INCR", kNodesVersion}});
}

long long Tables::nodes_version() {
  auto r = cmd({"GET", kNodesVersion});
  return r.is_nil() ? 0 : std::stoll(r.str());
}

std::vector<std::vector<std::string>> Tables::report_commands(const std::string& id, const NodeReport& n,
                                                              std::chrono::milliseconds ttl) {
  static constexpr const char* kNames[] = {"address",         "hostname",           "pid",
                                           "log_dir",         "leased",             "start_time",
                                           "workers",         "object_store_limit", "object_store_used",
                                           "spilled_bytes",   "spilled_objects",    "metrics"};
  std::vector<std::string> values{n.address,
                                  n.hostname,
                                  std::to_string(n.pid),
                                  n.log_dir,
                                  std::to_string(n.leased),
                                  std::to_string(n.start_time),
                                  std::to_string(n.workers),
                                  std::to_string(n.object_store_limit),
                                  std::to_string(n.object_store_used),
                                  std::to_string(n.spilled_bytes),
                                  std::to_string(n.spilled_objects),
                                  n.metrics};
  if (r_.reconnects() != reported_on_) {
    reported_.clear();  // a Redis that restarted may have lost the records
    reported_on_ = r_.reconnects();
  }
  auto last = reported_.find(id);
  bool full = last == reported_.end() || n.now - last->second.full_at >= kFullReportEvery || n.now < last->second.full_at;
  std::vector<std::string> hset{"HSET", node_key(id)};
  for (size_t i = 0; i < values.size(); ++i)
    if (full || values[i] != last->second.values[i]) hset.insert(hset.end(), {kNames[i], values[i]});
  std::vector<std::vector<std::string>> cmds;
  if (hset.size() > 2) cmds.push_back(std::move(hset));
  cmds.push_back({"SET", heartbeat_key(id), std::to_string(n.now), "PX", std::to_string(ttl.count())});
  // Counted as written now; a failed round trip forgets it (report, report_all), so the next
  // report writes the whole record again.
  auto& r = reported_[id];
  if (full) r.full_at = n.now;
  r.values = std::move(values);
  return cmds;
}

void Tables::report(const std::string& id, const NodeReport& n, std::chrono::milliseconds ttl) {
  try {
    uint64_t on = r_.reconnects();
    run_all(report_commands(id, n, ttl));
    // Reconnected on the way: the Redis may be a new one, so the whole record at once.
    if (r_.reconnects() != on) run_all(report_commands(id, n, ttl));
  } catch (...) {
    reported_.erase(id);
    throw;
  }
}

std::vector<bool> Tables::report_all(const std::vector<std::pair<std::string, NodeReport>>& reports,
                                     std::chrono::milliseconds ttl, const std::function<std::string(const std::string&)>& key) {
  std::vector<bool> present;
  if (reports.empty()) return present;
  try {
    for (int attempt = 0; attempt < 2; ++attempt) {
      uint64_t on = r_.reconnects();
      std::vector<std::vector<std::string>> cmds;
      std::vector<size_t> exists_at;
      cmds.reserve(reports.size() * 3);
      for (auto& [id, r] : reports) {
        exists_at.push_back(cmds.size());
        cmds.push_back({"EXISTS", key(id)});
        for (auto& c : report_commands(id, r, ttl)) cmds.push_back(std::move(c));
      }
      auto reps = pipeline(cmds);
      for (size_t i = 0; i < reps.size(); ++i)
        if (auto e = reps[i].error(); !e.empty()) throw Error("Redis at " + r_.address() + " refused " + cmds[i][0] + ": " + e);
      present.clear();
      for (size_t at : exists_at) present.push_back(reps[at].integer() != 0);
      if (r_.reconnects() == on) break;  // else a new Redis, perhaps: every record in full
    }
  } catch (...) {
    for (auto& [id, r] : reports) reported_.erase(id);
    throw;
  }
  return present;
}

void Tables::run_all(const std::vector<std::vector<std::string>>& cmds) {
  auto reps = pipeline(cmds);
  for (size_t i = 0; i < reps.size(); ++i)
    if (auto e = reps[i].error(); !e.empty()) throw Error("Redis at " + r_.address() + " refused " + cmds[i][0] + ": " + e);
}

bool Tables::heartbeating(const std::string& id) { return !cmd({"GET", heartbeat_key(id)}).is_nil(); }

std::vector<std::string> Tables::silent_nodes() {
  // Runs in Redis: one command however many nodes, and only the silent ones come back.
  static const char* kSilent = R"lua(
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  -- the key heartbeat_key() names
  if redis.call('EXISTS', 'yard:node:' .. id .. ':heartbeat') == 0 then out[#out + 1] = id end
end
return out
)lua";
  return cmd({"EVAL", kSilent, "1", kNodes}).strings();
}

std::vector<sys::RedisReply> Tables::each_node(const std::vector<std::string>& ids, const char* command,
                                              std::string (*key)(const std::string&)) {
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(ids.size());
  for (auto& id : ids) cmds.push_back({command, key(id)});
  if (cmds.empty()) return {};
  return pipeline(cmds);
}

std::vector<std::optional<double>> Tables::last_heartbeats(const std::vector<std::string>& ids) {
  std::vector<std::optional<double>> out;
  for (auto& r : each_node(ids, "GET", heartbeat_key)) {
    if (r.is_nil() || !r.error().empty()) {
      out.emplace_back();
      continue;
    }
    char* end = nullptr;
    auto text = r.str();
    double t = std::strtod(text.c_str(), &end);
    out.emplace_back(end && *end == 0 ? t : 0.0);  // an unreadable time still beats
  }
  return out;
}

void Tables::set_node_state(const std::string& id, NodeState s, double dead_at) {
  if (s == NodeState::kDead)
    cmd({"HSET", node_key(id), "state", name(s), "dead_at", std::to_string(dead_at)});
  else
    cmd({"HSET", node_key(id), "state", name(s)});
}

std::optional<NodeState> Tables::node_state(const std::string& id) {
  auto r = cmd({"HGET", node_key(id), "state"});
  return r.is_nil() ? std::nullopt : parse_node_state(r.str());
}

std::map<std::string, std::string> Tables::node_fields(const std::string& id) { return hgetall(node_key(id)); }

std::vector<std::map<std::string, std::string>> Tables::node_records(const std::vector<std::string>& ids) {
  std::vector<std::map<std::string, std::string>> out;
  for (auto& r : each_node(ids, "HGETALL", node_key)) {
    auto h = r.strings();
    auto& m = out.emplace_back();
    for (size_t k = 0; k + 1 < h.size(); k += 2) m[h[k]] = h[k + 1];
  }
  return out;
}

long Tables::leased_workers(const std::string& id) {
  auto r = cmd({"HGET", node_key(id), "leased"});
  return r.is_nil() ? 0 : std::atol(r.str().c_str());
}

std::vector<std::optional<Res>> Tables::free_resources(const std::vector<std::string>& ids) {
  std::vector<std::optional<Res>> out;
  for (auto& r : each_node(ids, "HGETALL", avail_key)) {
    auto kv = r.strings();
    if (kv.empty()) out.emplace_back();
    else out.emplace_back(res_of(kv));
  }
  return out;
}

std::vector<NodeResources> Tables::nodes_with_resources() {
  auto ids = node_ids();
  std::vector<std::vector<std::string>> cmds;
  for (auto& id : ids) {
    cmds.push_back({"HMGET", node_key(id), "address", "state", "hostname"});
    cmds.push_back({"HGETALL", total_key(id)});
    cmds.push_back({"HGETALL", avail_key(id)});
  }
  std::vector<NodeResources> out;
  if (cmds.empty()) return out;
  auto reps = pipeline(cmds);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto f = reps[3 * i].strings();
    NodeResources n;
    n.id = ids[i];
    if (f.size() == 3) {
      n.address = f[0];
      n.state = parse_node_state(f[1]);
      n.hostname = f[2];
    }
    n.total = res_of(reps[3 * i + 1].strings());
    auto avail = reps[3 * i + 2].strings();
    n.has_avail = !avail.empty();
    n.avail = res_of(avail);
    out.push_back(std::move(n));
  }
  return out;
}

// ---- jobs -----------------------------------------------------------------------------------

std::string Tables::new_job_id() { return "job-" + std::to_string(cmd({"INCR", kJobCounter}).integer()); }

void Tables::add_job(const std::string& id) { cmd({"RPUSH", kJobs, id}); }

std::vector<std::string> Tables::job_ids() { return cmd({"LRANGE", kJobs, "0", "-1"}).strings(); }

void Tables::save_job(const JobRecord& j) {
  cmd({"HSET", job_key(j.id), "entrypoint", j.entrypoint, "status", name(j.status), "exit_code",
          std::to_string(j.exit_code), "start", std::to_string(j.start), "end", std::to_string(j.end), "log",
          j.log_path, "driver_pid", std::to_string(j.driver_pid), "node", j.node, "submitted", j.submitted ? "1" : "0",
          "proc_pid", std::to_string(j.proc_pid), "binary", j.binary, "binary_digest", j.digest, "workdir_digest",
          j.workdir, "cwd", j.cwd});
}

std::optional<JobRecord> Tables::job(const std::string& id) {
  auto f = hgetall(job_key(id));
  if (f.empty()) return std::nullopt;
  JobRecord j;
  j.id = id;
  j.entrypoint = text(f, "entrypoint");
  j.status = parse_job_status(text(f, "status")).value_or(JobStatus::kFailed);
  j.exit_code = static_cast<int>(num(f, "exit_code"));
  j.start = num(f, "start");
  j.end = num(f, "end");
  j.log_path = text(f, "log");
  j.driver_pid = static_cast<long>(num(f, "driver_pid"));
  j.node = text(f, "node");
  j.submitted = text(f, "submitted") == "1";
  j.proc_pid = static_cast<long>(num(f, "proc_pid"));
  j.binary = text(f, "binary");
  j.digest = text(f, "binary_digest");
  j.workdir = text(f, "workdir_digest");
  j.cwd = text(f, "cwd");
  return j;
}

std::map<std::string, std::string> Tables::job_fields(const std::string& id) { return hgetall(job_key(id)); }

// ---- actors ---------------------------------------------------------------------------------

namespace {
std::vector<std::string> actor_hset(const ActorRecord& a) {
  return {"HSET", actor_key(a.id), "class", a.class_name, "name", a.name, "state", name(a.state), "address", a.address,
          "worker", a.worker, "job", a.job, "node", a.node, "death_cause", a.cause, "resources", json(a.resources).dump(),
          "max_restarts", std::to_string(a.max_restarts), "num_restarts", std::to_string(a.num_restarts),
          "placement_group", a.pg, "bundle", std::to_string(a.bundle), "place_bundle", std::to_string(a.place_bundle),
          "detached", a.detached ? "1" : "0"};
}
}  // namespace

void Tables::add_actor(const ActorRecord& a, const std::string& spec) {
  std::vector<std::vector<std::string>> cmds{{"SADD", kActors, a.id}, actor_hset(a)};
  if (!spec.empty()) cmds.push_back({"SET", spec_key(a.id), spec});
  if (!gather_) return run_all(cmds);
  for (auto& c : cmds) gathered_.push_back(std::move(c));
}

std::vector<std::string> Tables::actor_ids() { return cmd({"SMEMBERS", kActors}).strings(); }

void Tables::save_actor(const ActorRecord& a) {
  if (!gather_) {
    cmd(actor_hset(a));
    return;
  }
  gathered_.push_back(actor_hset(a));
}

// ---- writes gathered, and everything else after them

void Tables::write_gathered() {
  if (!gathered_.empty()) pipeline({});
}

void Tables::put_back(std::vector<std::vector<std::string>> cmds) {
  cmds.insert(cmds.end(), std::make_move_iterator(gathered_.begin()), std::make_move_iterator(gathered_.end()));
  gathered_ = std::move(cmds);
}

void Tables::refused(const std::vector<std::vector<std::string>>& cmds, const std::vector<sys::RedisReply>& reps,
                     size_t n) {
  for (size_t i = 0; i < n && i < reps.size(); ++i)
    if (auto e = reps[i].error(); !e.empty())
      spdlog::error("Redis at {} refused {} {}: {}", r_.address(), cmds[i][0], cmds[i].size() > 1 ? cmds[i][1] : "", e);
}

sys::RedisReply Tables::cmd(const std::vector<std::string>& args) {
  if (gathered_.empty()) return r_.cmd(args);
  auto reps = pipeline({args});
  if (auto e = reps[0].error(); !e.empty()) throw Error("Redis at " + r_.address() + " refused " + args[0] + ": " + e);
  return std::move(reps[0]);
}

std::vector<sys::RedisReply> Tables::pipeline(const std::vector<std::vector<std::string>>& cmds) {
  if (gathered_.empty()) return r_.pipeline(cmds);
  // The gathered writes first, in the same round trip.
  auto all = std::move(gathered_);
  gathered_.clear();
  size_t n = all.size();
  all.insert(all.end(), cmds.begin(), cmds.end());
  std::vector<sys::RedisReply> reps;
  try {
    reps = r_.pipeline(all);
  } catch (...) {
    all.resize(n);
    put_back(std::move(all));  // written again later (each command sets what it sets: twice is harmless)
    throw;
  }
  refused(all, reps, n);
  std::vector<sys::RedisReply> mine;
  mine.reserve(cmds.size());
  for (size_t i = n; i < reps.size(); ++i) mine.push_back(std::move(reps[i]));
  return mine;
}

std::map<std::string, std::string> Tables::hgetall(const std::string& key) {
  write_gathered();
  return r_.hgetall(key);
}

std::optional<ActorRecord> Tables::actor(const std::string& id) {
  auto f = hgetall(actor_key(id));
  auto state = parse_actor_state(text(f, "state"));
  if (f.empty() || !state) return std::nullopt;
  ActorRecord a;
  a.id = id;
  a.class_name = text(f, "class");
  a.name = text(f, "name");
  a.job = text(f, "job");
  a.state = *state;
  a.address = text(f, "address");
  a.worker = text(f, "worker");
  a.node = text(f, "node");
  a.cause = text(f, "death_cause");
  try {
    auto res = json::parse(text(f, "resources"));  // named: items() refers into it
    for (auto& [k, v] : res.items()) a.resources[k] = v.get<double>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  a.max_restarts = static_cast<int>(num(f, "max_restarts"));
  a.num_restarts = static_cast<uint32_t>(num(f, "num_restarts"));
  a.pg = text(f, "placement_group");
  a.bundle = static_cast<int>(num(f, "bundle", -1));
  a.place_bundle = static_cast<int>(num(f, "place_bundle", -1));
  a.detached = text(f, "detached") == "1";
  return a;
}

std::optional<std::string> Tables::actor_spec(const std::string& id) {
  auto r = cmd({"GET", spec_key(id)});
  if (r.is_nil()) return std::nullopt;
  return r.str();
}

void Tables::drop_actor_spec(const std::string& id) { cmd({"DEL", spec_key(id)}); }

void Tables::name_actor(const std::string& name, const std::string& id) { cmd({"HSET", kActorNames, name, id}); }

void Tables::forget_actors(const std::vector<std::pair<std::string, std::string>>& ids_and_names) {
  std::vector<std::vector<std::string>> cmds;
  for (auto& [id, name] : ids_and_names) {
    if (!name.empty()) cmds.push_back({"HDEL", kActorNames, name});
    cmds.push_back({"SREM", kActors, id});
    cmds.push_back({"DEL", actor_key(id), spec_key(id)});
  }
  if (!cmds.empty()) run_all(cmds);
}

// ---- placement groups -----------------------------------------------------------------------

std::string Tables::group_key(const std::string& id) { return keys::placement_group(id); }

std::vector<std::string> Tables::group_fields(const GroupRecord& g) {
  return {group_key(g.id), "name", g.name, "job", g.job, "strategy", policy::name(g.strategy), "state", name(g.state),
          "bundles", json(g.bundles).dump(), "nodes", json(g.nodes).dump()};
}

void Tables::save_group(const GroupRecord& g) {
  auto args = group_fields(g);
  args.insert(args.begin(), "HSET");
  cmd(args);
}

std::vector<std::string> Tables::group_ids() {
  std::vector<std::string> ids;
  std::string cursor = "0";
  const std::string prefix = group_key("");
  do {
    auto r = cmd({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    cursor = r.at(0);
    for (auto& k : r.nested_strings(1)) ids.push_back(k.substr(prefix.size()));
  } while (cursor != "0");
  return ids;
}

std::optional<GroupRecord> Tables::group(const std::string& id) {
  auto f = hgetall(group_key(id));
  auto state = parse_group_state(text(f, "state"));
  if (f.empty() || !state) return std::nullopt;
  GroupRecord g;
  g.id = id;
  g.name = text(f, "name");
  g.job = text(f, "job");
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

// ---- events ---------------------------------------------------------------------------------

namespace {
std::string timeline_key(const std::string& job) { return keys::timeline(job); }
std::string curves_key(const std::string& job) { return keys::curves(job); }
}  // namespace

// Appends to a list that keeps its newest `keep` items for a week.
void Tables::append_capped(const std::string& key, const std::vector<std::string>& items, long keep) {
  if (items.empty()) return;
  std::vector<std::string> push{"RPUSH", key};
  push.insert(push.end(), items.begin(), items.end());
  run_all({push, {"LTRIM", key, std::to_string(-keep), "-1"}, {"EXPIRE", key, "604800"}});
}

void Tables::append_timeline(const std::string& job, const std::vector<std::string>& spans) {
  append_capped(timeline_key(job), spans, 2000);
}
std::vector<std::string> Tables::timeline(const std::string& job) {
  return cmd({"LRANGE", timeline_key(job), "0", "-1"}).strings();
}
void Tables::append_curves(const std::string& job, const std::vector<std::string>& points) {
  append_capped(curves_key(job), points, 20000);
}
std::vector<std::string> Tables::curves(const std::string& job) {
  return cmd({"LRANGE", curves_key(job), "0", "-1"}).strings();
}

void Tables::publish(const std::string& ev) {
  run_all({{"PUBLISH", kEvents, ev}, {"RPUSH", kEventLog, ev}, {"LTRIM", kEventLog, "-10000", "-1"}});
}

}  // namespace yard::sched::store
