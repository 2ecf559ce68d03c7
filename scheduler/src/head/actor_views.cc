// What the head shows of its actors: pure functions of ActorManager::all() (actors.h), for
// `yard status`, the dashboard, metrics, drains and the queue's accounting.
#include <string_view>

#include "head/actors.h"

namespace yard::sched {

std::vector<std::string> actors_on_node(const ActorMap& actors, const std::string& node) {
  std::vector<std::string> out;
  for (auto& [aid, a] : actors)
    if (a.node == node && (a.state == store::ActorState::kAlive || a.placing)) out.push_back(aid);
  return out;
}

bool bundle_in_use(const ActorMap& actors, const std::string& group, int bundle) {
  for (auto& [aid, a] : actors)
    if (a.pg == group && a.bundle == bundle && a.state != store::ActorState::kDead) return true;
  return false;
}

std::map<std::pair<std::string, std::string>, int> actor_counts(const ActorMap& actors) {
  std::map<std::pair<store::ActorState, std::string_view>, int> by;  // no string made per actor
  for (auto& [id, a] : actors) ++by[{a.state, a.class_name}];
  std::map<std::pair<std::string, std::string>, int> n;
  for (auto& [k, c] : by) n[{store::name(k.first), std::string(k.second)}] += c;
  return n;
}

nlohmann::json actor_row(const store::ActorRecord& a, std::map<std::string, nlohmann::json>& per_node) {
  if (a.state == store::ActorState::kAlive) per_node[a.node].push_back(a.id);
  return {{"actor_id", a.id}, {"class", a.class_name}, {"name", a.name}, {"state", store::name(a.state)},
          {"job", a.job}, {"node", a.node}, {"address", a.address}, {"death_cause", a.cause},
          {"restarts", a.num_restarts}, {"max_restarts", a.max_restarts}, {"resources", a.resources},
          {"placement_group", a.pg}, {"detached", a.detached}, {"namespace", a.ns}, {"owner", a.owner}};
}

nlohmann::json actor_rows(const ActorMap& actors, std::map<std::string, nlohmann::json>& per_node, bool rows) {
  auto out = nlohmann::json::array();
  for (auto& [id, a] : actors) {
    if (rows)
      out.push_back(actor_row(a, per_node));
    else if (a.state == store::ActorState::kAlive)
      per_node[a.node].push_back(id);
  }
  return out;
}

std::vector<store::ActorRecord> actor_records(const ActorMap& actors) {
  std::vector<store::ActorRecord> out;
  out.reserve(actors.size());
  for (auto& [id, a] : actors) out.push_back(a);
  return out;
}

nlohmann::json waiting_actors(const ActorMap& actors) {
  auto out = nlohmann::json::array();
  auto now = Clock::now();
  for (auto& [id, a] : actors) {
    if (!a.wait_why || a.waiting.empty() || a.state != store::ActorState::kPending) continue;
    out.push_back({{"kind", "actor"}, {"id", a.id}, {"what", a.class_name}, {"job", a.job}, {"needs", a.resources},
                   {"reason", policy::name(a.wait_why->reason)}, {"detail", a.wait_why->detail}, {"text", a.waiting},
                   {"for_s", std::chrono::duration<double>(now - a.waiting_since).count()}});
  }
  return out;
}

}  // namespace yard::sched
