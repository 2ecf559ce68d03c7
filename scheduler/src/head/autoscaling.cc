// The head's autoscaler (--autoscaler cluster.toml): its provider, and its view of the head's
// parts (autoscale/autoscaler.h).
#include <spdlog/spdlog.h>

#include "head/head_service.h"

namespace yard::sched {

void HeadService::start_autoscaler() {
  if (!autoscale_config_) return;
  ProviderContext pc{io_->address(), token_, log_dir_, o_.heartbeat_timeout_s};
  auto provider = autoscale_config_->provider == "slurm" ? slurm_provider(pc, autoscale_config_->slurm)
                                                         : local_provider(pc);
  Autoscaler::Context c{
      *nodes_,
      [this] {
        auto d = actors_->pending_demand();
        auto g = groups_->pending_demand();
        d.insert(d.end(), g.begin(), g.end());
        return d;
      },
      [this](const std::string& node) { return actors_->on_node(node).empty(); },
      [this](const std::string& node) { drain(node, std::chrono::minutes(10), false, "", 0); },
      [this](const std::string& ev) { publish(ev); }};
  autoscaler_ = std::make_unique<Autoscaler>(*autoscale_config_, std::move(provider), std::move(c));
  std::string types;
  for (auto& t : autoscale_config_->types)
    types += fmt::format("{}{} ({}, {}..{})", types.empty() ? "" : ", ", t.name, res_text(t.resources), t.min_nodes,
                         t.max_nodes);
  spdlog::info("autoscaler: {} provider, node types {}; idle nodes stop after {} s", autoscale_config_->provider, types,
               autoscale_config_->idle_timeout_s);
}

}  // namespace yard::sched
