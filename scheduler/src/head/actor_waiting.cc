// Actors that no running node can hold: they wait for a node that can (one the autoscaler starts,
// or one that joins), with the reason shown to their creator and in `yard status`, until their
// infeasible_timeout; with the cluster's [scheduling] infeasible = "fail" they are refused.
#include <spdlog/spdlog.h>

#include "head/actors.h"

namespace yard::sched {

using namespace detail;

bool ActorManager::wait_for_node(Actor& a, const std::string& why) {
  if (!a.affinity_node.empty()) return false;  // the node it names is gone or could never hold it
  a.wait_why = policy::wait_for_nodes(could_add_node_ && could_add_node_(a.resources), infeasible_waits_ && infeasible_waits_(),
                                      "actor " + a.class_name + " needs " + res_text(a.resources) + ": " + why);
  if (!a.wait_why) return false;
  a.waiting = policy::text(*a.wait_why);
  a.waiting_since = Clock::now();
  return true;
}

void ActorManager::answer_waiting(Actor& a) {
  if (a.replied || a.waiting.empty() || a.state != store::ActorState::kPending || a.placing) return;
  a.replied = true;
  spdlog::warn("actor {} waits: {}", a.id, a.waiting);
  OutMessage m(token_, a.creator_req, true);
  fill_actor_info(m.env().getBody().initActorInfo(), a);
  io_.reply(a.creator_routing, m.finish());
}

void ActorManager::expire_waiting() {
  auto now = Clock::now();
  for (auto& id : pending_actors_) {
    auto f = actors_.find(id);
    if (f == actors_.end()) continue;
    auto& a = f->second;
    if (a.waiting.empty() || a.state != store::ActorState::kPending || a.placing || a.infeasible_deadline > now) continue;
    double waited = std::chrono::duration<double>(now - a.waiting_since).count();
    actor_failed(a, wire::ErrorCode::INFEASIBLE,
                 fmt::format("{} (it waited {:.0f} s, its infeasible_timeout)", a.waiting, waited));
  }
}

}  // namespace yard::sched
