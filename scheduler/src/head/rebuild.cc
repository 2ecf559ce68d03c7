// Taking over after a killed head: the cluster is read back from the control store. Nodes and
// their actors kept running meanwhile; jobs, actors (with their creation messages, for restarts),
// placement groups, names and dead nodes come from their records.
#include "head/head_service.h"

#include <spdlog/spdlog.h>

namespace yard::sched {

void HeadService::rebuild() {
  for (auto& id : tables_->nodes.ids())
    if (tables_->nodes.state(id) == store::NodeState::kDead) nodes_->mark_dead(id);
  nodes_->refresh();
  size_t jobs = jobs_->rebuild();
  actors_->rebuild();
  groups_->rebuild();
  spdlog::warn("rebuilt from Redis: {} running jobs, {} actors", jobs, actors_->size());
}

}  // namespace yard::sched
