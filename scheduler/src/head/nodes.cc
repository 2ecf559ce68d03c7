// Nodes as the head sees them: membership and resources, the failure detector, and drains.
#include "head/head_service.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "yard/process.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

// The failure detector: a node whose heartbeat key expired is dead. It is marked in its record,
// announced on "yard:events", its resources are withdrawn, its actors restart elsewhere (as far as
// their max_restarts allow) and its placement-group bundles are placed again.
void HeadService::check_nodes() {
  try {
    auto members = tables_->node_ids();
    // After the control store was away (restarted, unreachable), nodes get one full timeout to
    // heartbeat again before anyone is declared dead.
    if (redis_->reconnects() != seen_reconnects_) {
      seen_reconnects_ = redis_->reconnects();
      grace_until_ = Clock::now() + std::chrono::milliseconds(static_cast<long>(o_.heartbeat_timeout_s * 1000));
      spdlog::warn("reconnected to Redis: no node is declared dead for {} s", o_.heartbeat_timeout_s);
    }
    bool grace = Clock::now() < grace_until_;
    for (auto& id : members) {
      bool beating = tables_->heartbeating(id);
      if (beating && nodes_->dead(id)) {
        // Back (a healed partition, a paused process): it fences itself and rejoins empty.
        nodes_->mark_alive(id);
        tables_->set_node_state(id, store::NodeState::kAlive);
        publish(json{{"type", "node_alive"}, {"node_id", id}, {"time", unix_time()}}.dump());
        spdlog::warn("node {} is heartbeating again", id);
        continue;
      }
      if (beating || nodes_->dead(id) || grace) continue;
      node_died(id);
    }
    nodes_->refresh();
    check_drains();
  } catch (const std::exception& e) {
    spdlog::error("checking nodes: {}", e.what());
  }
}

// Marked in its record, announced on "yard:events", its resources withdrawn, its actors restarted
// elsewhere (as far as their max_restarts allow) and its placement-group bundles placed again.
void HeadService::node_died(const std::string& id) {
  nodes_->mark_dead(id);
  double now = unix_time();
  unregister_resources(*redis_, id);
  tables_->set_node_state(id, store::NodeState::kDead, now);
  publish(json{{"type", "node_dead"}, {"node_id", id}, {"time", now}}.dump());
  spdlog::warn("node {}: its heartbeat expired: marked dead", id);
  for (auto& [aid, a] : actors_)
    if (a.node == id && (a.state == store::ActorState::kAlive || a.placing)) actor_lost(a, "its node " + id + " died", true);
  groups_->node_died(id);
}

// ---- draining ---------------------------------------------------------------------------------

// `yard drain NODE`: nothing new goes there; actors that may restart move elsewhere now (without
// using up their restarts); the rest, and leased task workers, are waited for. Then the node is
// told to stop, and leaves the cluster.
void HeadService::on_drain(Incoming& in) {
  auto d = in.msg->env().getBody().getDrainNode();
  std::string id = d.getNodeId();
  if (id == head_node_) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, "node " + id + " is the head's; stop the cluster instead (yard stop)");
    return;
  }
  if (!nodes_->find(id) || nodes_->dead(id)) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no live node " + id + " (yard status lists the nodes)");
    return;
  }
  nodes_->start_drain(id);
  tables_->set_node_state(id, store::NodeState::kDraining);
  publish(json{{"type", "node_draining"}, {"node_id", id}, {"time", unix_time()}}.dump());
  spdlog::info("draining node {}", id);
  move_off(id);
  drains_.push_back({id, in.routing_id, in.msg->env().getRequestId(),
                     Clock::now() + std::chrono::milliseconds(d.getTimeoutMs()), d.getForce()});
  process_actors();
}

// Actors on a draining node that may restart are placed elsewhere now; bundles nothing uses
// there are placed again.
void HeadService::move_off(const std::string& id) {
  for (auto& [aid, a] : actors_) {
    if (a.node != id || a.state != store::ActorState::kAlive || a.max_restarts == 0 || !a.create_msg) continue;
    kill_actor_process(a);
    a.killed = false;
    free_actor_bundle(a);
    a.state = store::ActorState::kRestarting;
    a.placing = false;
    a.address.clear();
    a.worker.clear();
    a.node.clear();
    a.cause = "moved off node " + id + ", which is draining";
    // A move is a restart for the actor (it starts from its constructor) but does not use up its
    // budget.
    ++a.num_restarts;
    if (a.max_restarts > 0) ++a.max_restarts;
    ++a.epoch;
    save_actor(a);
    pending_actors_.push_back(aid);
  }
  groups_->move_off(id, [this](const std::string& group, int bundle) {
    for (auto& [aid, a] : actors_)
      if (a.pg == group && a.bundle == bundle && a.state != store::ActorState::kDead) return true;
    return false;
  });
}

void HeadService::check_drains() {
  auto now = Clock::now();
  for (auto it = drains_.begin(); it != drains_.end();) {
    auto& d = *it;
    std::vector<std::string> left;
    for (auto& [aid, a] : actors_)
      if (a.node == d.node && (a.state == store::ActorState::kAlive || a.placing)) left.push_back(aid);
    long leased = 0;
    try {
      leased = tables_->leased_workers(d.node);
    } catch (...) {
    }
    bool gone = nodes_->dead(d.node) || !nodes_->find(d.node);
    bool idle = left.empty() && leased == 0;
    if (!gone && !idle && now < d.deadline) {
      ++it;
      continue;
    }
    if (!gone && !idle && !d.force) {
      std::string ids;
      for (auto& x : left) ids += (ids.empty() ? "" : ", ") + x;
      reply_.error(d.routing, d.req, wire::ErrorCode::TIMEOUT,
                  "node " + d.node + " is still busy (" + std::to_string(left.size()) + " actors" +
                      (ids.empty() ? "" : ": " + ids) + "; " + std::to_string(leased) +
                      " leased task workers); it takes no new work. Wait longer, or stop them with --force");
      it = drains_.erase(it);
      continue;
    }
    for (auto& aid : left) {
      auto& a = actors_.at(aid);
      a.killed = true;
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its node " + d.node + " was drained");
    }
    if (!gone) {
      uint64_t rid = io_->next_request_id();
      OutMessage m(token_, rid, false);
      m.env().getBody().setShutdown();
      notify(nodes_->address(d.node), m.finish(), rid);
    }
    nodes_->end_drain(d.node);
    spdlog::info("node {} drained", d.node);
    publish(json{{"type", "node_drained"}, {"node_id", d.node}, {"time", unix_time()}}.dump());
    OutMessage m(token_, d.req, true);
    m.env().getBody().setOk();
    io_->reply(d.routing, m.finish());
    it = drains_.erase(it);
  }
}

void HeadService::count_actors(policy::ClusterView& view) const {
  std::map<std::string, int> count;
  for (auto& [id, x] : actors_)
    if (x.state != store::ActorState::kDead && !x.node.empty()) ++count[x.node];
  for (auto& n : view.nodes) n.actors = count[n.id];
}

}  // namespace yard::sched
