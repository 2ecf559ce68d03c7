// The head's autoscaler (--autoscaler cluster.toml): its provider, and its view of the head's
// parts (autoscale/autoscaler.h).
#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "head/head_service.h"

namespace yard::sched {

namespace {
// The task leases node managers report waiting for room (yard:demand), as demand.
void add_lease_demand(store::Tables& tables, const ClusterNodes& nodes, std::vector<policy::Demand>& out) {
  for (auto& [node, text] : tables.cluster.lease_demand()) {
    if (nodes.dead(node) || !nodes.find(node)) continue;
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_array()) continue;
    for (auto& e : j) {
      if (!e.is_object() || !e.contains("need") || !e["need"].is_object()) continue;
      Res need;
      for (auto& [k, v] : e["need"].items())
        if (v.is_number()) need[k] = v.get<double>();
      int n = std::min(100, e.value("count", 0));
      for (int i = 0; i < n; ++i) out.push_back({need, "tasks waiting at " + node, false, {}});
    }
  }
}
}  // namespace

void HeadService::start_autoscaler() {
  // Node managers read the node types: a lease no running node holds then waits for one.
  nlohmann::json types = nlohmann::json::array();
  if (autoscale_config_)
    for (auto& t : autoscale_config_->types) types.push_back(t.resources);
  bool scaling = autoscale_config_ && !autoscale_config_->types.empty();  // a --config file may only hold teams
  tables_->cluster.set_autoscale_types(scaling ? types.dump() : "");
  tables_->cluster.set_infeasible_fails(autoscale_config_ && autoscale_config_->infeasible_fails);
  if (!scaling) return;
  ProviderContext pc{io_->address(), token_, log_dir_, o_.heartbeat_timeout_s};
  auto provider = autoscale_config_->provider == "slurm" ? slurm_provider(pc, autoscale_config_->slurm)
                                                         : local_provider(pc, autoscale_config_->local);
  Autoscaler::Context c{
      *nodes_,
      [this] {
        auto d = actors_->pending_demand();
        auto g = groups_->pending_demand();
        d.insert(d.end(), g.begin(), g.end());
        auto q = queue_->pending_demand();  // queued jobs no node has room for (a requeued one too)
        d.insert(d.end(), q.begin(), q.end());
        try {
          add_lease_demand(*tables_, *nodes_, d);
        } catch (const std::exception& e) {
          spdlog::warn("autoscaler: reading the nodes' waiting leases: {}", e.what());
        }
        return d;
      },
      [this](const std::string& node) { return actors_on_node(actors_->all(), node).empty(); },
      [this](const std::string& node) { watch_->drain(node, std::chrono::minutes(10), false, "", 0); },
      [this](const std::string& ev) { publish(ev); }};
  autoscaler_ = std::make_unique<Autoscaler>(*autoscale_config_, std::move(provider), std::move(c));
  std::string names;
  for (auto& t : autoscale_config_->types)
    names += fmt::format("{}{} ({}, {}..{})", names.empty() ? "" : ", ", t.name, res_text(t.resources), t.min_nodes,
                         t.max_nodes);
  spdlog::info("autoscaler: {} provider, node types {}; idle nodes stop after {} s", autoscale_config_->provider, names,
               autoscale_config_->idle_timeout_s);
}

}  // namespace yard::sched
