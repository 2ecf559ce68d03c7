#include "store/tables.h"

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

namespace yard::sched::store {

void ClusterInfo::put(const std::string& address, const std::string& session_dir, const std::string& log_dir,
                         double start_time) {
  s_.cmd({"HSET", keys::cluster(), "address", address, "session_dir", session_dir, "log_dir", log_dir, "start_time",
          std::to_string(start_time)});
}

void ClusterInfo::set_head_node(const std::string& id) { s_.cmd({"HSET", keys::cluster(), "head_node", id}); }
void ClusterInfo::set_head_metrics(const std::string& address) { s_.cmd({"HSET", keys::cluster(), "metrics", address}); }
void ClusterInfo::set_dashboard(const std::string& url) { s_.cmd({"HSET", keys::cluster(), "dashboard", url}); }

std::map<std::string, std::string> ClusterInfo::fields() { return s_.hgetall(keys::cluster()); }

void ClusterInfo::set_autoscale_types(const std::string& json) {
  if (json.empty()) s_.cmd({"HDEL", keys::cluster(), "autoscale_types"});
  else s_.cmd({"HSET", keys::cluster(), "autoscale_types", json});
}

std::string ClusterInfo::autoscale_types() {
  auto r = s_.cmd({"HGET", keys::cluster(), "autoscale_types"});
  return r.is_nil() ? std::string() : r.str();
}

void ClusterInfo::set_lease_demand(const std::string& node, const std::string& json) {
  if (json.empty()) s_.cmd({"HDEL", keys::demand(), node});
  else s_.cmd({"HSET", keys::demand(), node, json});
}

std::map<std::string, std::string> ClusterInfo::lease_demand() { return s_.hgetall(keys::demand()); }

}  // namespace yard::sched::store
