#include "store/tables.h"

#include <cstdlib>

#include "store/fields.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"
#include "resources.h"
#include "yard/errors.h"

using yard::sched::store::fields::res_of;

namespace yard::sched::store {

std::vector<std::string> Nodes::ids() { return s_.cmd({"SMEMBERS", keys::nodes()}).strings(); }

// Each of these is one round trip; the commands run in the order given.
void Nodes::add(const std::string& id, const std::string& role) {
  s_.run_all({{"HSET", keys::node(id), "role", role, "state", name(NodeState::kAlive)},
           {"SADD", keys::nodes(), id},
           {"INCR", keys::nodes_version()}});
}

void Nodes::remove(const std::string& id) {
  s_.run_all({{"SREM", keys::nodes(), id}, {"DEL", keys::heartbeat(id)}, {"INCR", keys::nodes_version()}});
}

long long Nodes::version() {
  auto r = s_.cmd({"GET", keys::nodes_version()});
  return r.is_nil() ? 0 : std::stoll(r.str());
}

std::vector<std::vector<std::string>> Nodes::report_commands(const std::string& id, const NodeReport& n,
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
  if (s_.reconnects() != reported_on_) {
    reported_.clear();  // a Redis that restarted may have lost the records
    reported_on_ = s_.reconnects();
  }
  auto last = reported_.find(id);
  bool full = last == reported_.end() || n.now - last->second.full_at >= kFullReportEvery || n.now < last->second.full_at;
  std::vector<std::string> hset{"HSET", keys::node(id)};
  for (size_t i = 0; i < values.size(); ++i)
    if (full || values[i] != last->second.values[i]) hset.insert(hset.end(), {kNames[i], values[i]});
  std::vector<std::vector<std::string>> cmds;
  if (hset.size() > 2) cmds.push_back(std::move(hset));
  cmds.push_back({"SET", keys::heartbeat(id), std::to_string(n.now), "PX", std::to_string(ttl.count())});
  // Counted as written now; a failed round trip forgets it (report, report_all), so the next
  // report writes the whole record again.
  auto& r = reported_[id];
  if (full) r.full_at = n.now;
  r.values = std::move(values);
  return cmds;
}

void Nodes::report(const std::string& id, const NodeReport& n, std::chrono::milliseconds ttl) {
  try {
    uint64_t on = s_.reconnects();
    s_.run_all(report_commands(id, n, ttl));
    // Reconnected on the way: the Redis may be a new one, so the whole record at once.
    if (s_.reconnects() != on) s_.run_all(report_commands(id, n, ttl));
  } catch (...) {
    reported_.erase(id);
    throw;
  }
}

std::vector<bool> Nodes::report_all(const std::vector<std::pair<std::string, NodeReport>>& reports,
                                     std::chrono::milliseconds ttl, const std::function<std::string(const std::string&)>& key) {
  std::vector<bool> present;
  if (reports.empty()) return present;
  try {
    for (int attempt = 0; attempt < 2; ++attempt) {
      uint64_t on = s_.reconnects();
      std::vector<std::vector<std::string>> cmds;
      std::vector<size_t> exists_at;
      cmds.reserve(reports.size() * 3);
      for (auto& [id, r] : reports) {
        exists_at.push_back(cmds.size());
        cmds.push_back({"EXISTS", key(id)});
        for (auto& c : report_commands(id, r, ttl)) cmds.push_back(std::move(c));
      }
      auto reps = s_.pipeline(cmds);
      for (size_t i = 0; i < reps.size(); ++i)
        if (auto e = reps[i].error(); !e.empty()) throw Error("Redis at " + s_.address() + " refused " + cmds[i][0] + ": " + e);
      present.clear();
      for (size_t at : exists_at) present.push_back(reps[at].integer() != 0);
      if (s_.reconnects() == on) break;  // else a new Redis, perhaps: every record in full
    }
  } catch (...) {
    for (auto& [id, r] : reports) reported_.erase(id);
    throw;
  }
  return present;
}

bool Nodes::heartbeating(const std::string& id) { return !s_.cmd({"GET", keys::heartbeat(id)}).is_nil(); }

std::vector<std::string> Nodes::silent() {
  // Runs in Redis: one command however many nodes, and only the silent ones come back.
  static const char* kSilent = R"lua(
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  -- the key keys::heartbeat() names
  if redis.call('EXISTS', 'yard:node:' .. id .. ':heartbeat') == 0 then out[#out + 1] = id end
end
return out
)lua";
  return s_.cmd({"EVAL", kSilent, "1", keys::nodes()}).strings();
}

std::vector<std::optional<double>> Nodes::last_heartbeats(const std::vector<std::string>& ids) {
  std::vector<std::optional<double>> out;
  for (auto& r : s_.each(ids, "GET", keys::heartbeat)) {
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

void Nodes::set_state(const std::string& id, NodeState s, double dead_at) {
  if (s == NodeState::kDead)
    s_.cmd({"HSET", keys::node(id), "state", name(s), "dead_at", std::to_string(dead_at)});
  else
    s_.cmd({"HSET", keys::node(id), "state", name(s)});
}

std::optional<NodeState> Nodes::state(const std::string& id) {
  auto r = s_.cmd({"HGET", keys::node(id), "state"});
  return r.is_nil() ? std::nullopt : parse_node_state(r.str());
}

std::map<std::string, std::string> Nodes::fields(const std::string& id) { return s_.hgetall(keys::node(id)); }

std::vector<std::map<std::string, std::string>> Nodes::records(const std::vector<std::string>& ids) {
  std::vector<std::map<std::string, std::string>> out;
  for (auto& r : s_.each(ids, "HGETALL", keys::node)) {
    auto h = r.strings();
    auto& m = out.emplace_back();
    for (size_t k = 0; k + 1 < h.size(); k += 2) m[h[k]] = h[k + 1];
  }
  return out;
}

long Nodes::leased_workers(const std::string& id) {
  auto r = s_.cmd({"HGET", keys::node(id), "leased"});
  return r.is_nil() ? 0 : std::atol(r.str().c_str());
}

std::vector<std::optional<Res>> Nodes::free_resources(const std::vector<std::string>& ids) {
  std::vector<std::optional<Res>> out;
  for (auto& r : s_.each(ids, "HGETALL", avail_key)) {
    auto kv = r.strings();
    if (kv.empty()) out.emplace_back();
    else out.emplace_back(res_of(kv));
  }
  return out;
}

std::vector<NodeResources> Nodes::with_resources() {
  auto ids = this->ids();
  std::vector<std::vector<std::string>> cmds;
  for (auto& id : ids) {
    cmds.push_back({"HMGET", keys::node(id), "address", "state", "hostname"});
    cmds.push_back({"HGETALL", total_key(id)});
    cmds.push_back({"HGETALL", avail_key(id)});
  }
  std::vector<NodeResources> out;
  if (cmds.empty()) return out;
  auto reps = s_.pipeline(cmds);
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

}  // namespace yard::sched::store
