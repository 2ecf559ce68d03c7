#include "store/tables.h"

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

#include <cstdlib>
#include <ctime>

namespace yard::sched::store {

void ClusterInfo::put(const std::string& address, const std::string& session_dir, const std::string& log_dir,
                         double start_time) {
  s_.cmd({"HSET", keys::cluster(), "address", address, "session_dir", session_dir, "log_dir", log_dir, "start_time",
          std::to_string(start_time)});
}

void ClusterInfo::set_head_node(const std::string& id) { s_.cmd({"HSET", keys::cluster(), "head_node", id}); }
void ClusterInfo::set_head_metrics(const std::string& address) { s_.cmd({"HSET", keys::cluster(), "metrics", address}); }
void ClusterInfo::set_servers_session(const std::string& dir) {
  s_.cmd({"HSET", keys::cluster(), "servers_session", dir});
}
void ClusterInfo::set_dashboard(const std::string& url) { s_.cmd({"HSET", keys::cluster(), "dashboard", url}); }

std::map<std::string, std::string> ClusterInfo::fields() { return s_.hgetall(keys::cluster()); }

void ClusterInfo::set_autoscale_types(const std::string& json) {
  if (json.empty()) s_.cmd({"HDEL", keys::cluster(), "autoscale_types"});
  else s_.cmd({"HSET", keys::cluster(), "autoscale_types", json});
}

void ClusterInfo::set_infeasible_fails(bool fails) {
  if (fails) s_.cmd({"HSET", keys::cluster(), "infeasible", "fail"});
  else s_.cmd({"HDEL", keys::cluster(), "infeasible"});
}

LeaseSettings ClusterInfo::lease_settings() {
  auto r = s_.pipeline({{"HMGET", keys::cluster(), "autoscale_types", "infeasible"}});
  return {r[0].at(0), r[0].at(1) == "fail"};
}

void ClusterInfo::set_lease_demand(const std::string& node, const std::string& json) {
  if (json.empty()) s_.cmd({"HDEL", keys::demand(), node});
  else s_.cmd({"HSET", keys::demand(), node, json});
}

std::map<std::string, std::string> ClusterInfo::lease_demand() { return s_.hgetall(keys::demand()); }

void ClusterInfo::set_lease_holdings(const std::string& node, const std::string& json) {
  if (json.empty()) s_.cmd({"HDEL", keys::held(), node});
  else s_.cmd({"HSET", keys::held(), node, json});
}

std::map<std::string, std::string> ClusterInfo::lease_holdings() { return s_.hgetall(keys::held()); }

ActiveHead Heads::active() {
  auto reps = s_.pipeline({{"HMGET", keys::head(), "address", "holder", "epoch"}, {"EXISTS", keys::head_lease()}});
  ActiveHead a;
  a.address = reps[0].at(0);
  a.holder = reps[0].at(1);
  a.epoch = std::strtoull(reps[0].at(2).c_str(), nullptr, 10);
  a.leased = reps[1].integer() == 1;
  return a;
}

void Heads::announce_standby(const std::string& address, std::chrono::milliseconds ttl) {
  s_.cmd({"SET", keys::head_standby(address), std::to_string(time(nullptr)), "PX", std::to_string(ttl.count())});
}

void Heads::withdraw_standby(const std::string& address) { s_.cmd({"DEL", keys::head_standby(address)}); }

std::vector<std::string> Heads::standbys() {
  std::vector<std::string> out;
  std::string cursor = "0";
  do {
    auto rep = s_.cmd({"SCAN", cursor, "MATCH", keys::glob_literal(keys::kStandbyPrefix) + "*", "COUNT", "100"});
    cursor = rep.at(0);
    for (auto& k : rep.nested_strings(1)) out.push_back(k.substr(keys::kStandbyPrefix.size()));
  } while (cursor != "0");
  return out;
}

}  // namespace yard::sched::store
