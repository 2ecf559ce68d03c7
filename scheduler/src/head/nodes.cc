// Nodes as the head sees them: membership and resources, the failure detector, and drains.
#include "head/head_service.h"

#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "yard/process.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

// The failure detector: a node whose heartbeat key expired is dead. It is marked in its record,
// announced on "yard:events", its resources are withdrawn, its actors restart elsewhere (as far as
// their max_restarts allow) and its placement-group bundles are placed again. After the control
// store was away or this process (or the store) stalled, nodes get one full timeout to heartbeat
// again before anyone is declared dead (policy::Liveness).
void HeadService::check_nodes() {
  // Without a valid lease this head may not act on what it sees (a standby may lead by now); the
  // check after the gap sees a stall and gives every node a full timeout.
  if (!lease_->valid()) return;
  try {
    // The members without a heartbeat, found by one script in Redis: the head reads only those.
    auto silent_ids = tables_->nodes.silent();
    auto now = Clock::now();
    bool reconnected = redis_->reconnects() != seen_reconnects_;
    seen_reconnects_ = redis_->reconnects();
    switch (liveness_.observe(now, reconnected)) {
      case policy::Liveness::Pause::kReconnected:
        spdlog::warn("reconnected to Redis: no node is declared dead for {} s", o_.heartbeat_timeout_s);
        break;
      case policy::Liveness::Pause::kStalled:
        spdlog::warn("the failure detector ran {:.1f} s after its last check (this process or Redis stalled): no "
                     "node is declared dead for {} s",
                     std::chrono::duration<double>(liveness_.last_gap()).count(), o_.heartbeat_timeout_s);
        break;
      case policy::Liveness::Pause::kNone:
        break;
    }
    std::set<std::string> silent(silent_ids.begin(), silent_ids.end());
    auto dead = nodes_->dead_ids();  // a copy: marking one alive changes the set
    for (auto& id : dead) {
      if (silent.count(id) || !nodes_->find(id)) continue;
      // Back (a healed partition, a paused process): it fences itself and rejoins empty.
      nodes_->mark_alive(id);
      tables_->nodes.set_state(id, store::NodeState::kAlive);
      publish(json{{"type", "node_alive"}, {"node_id", id}, {"time", unix_time()}}.dump());
      spdlog::warn("node {} is heartbeating again", id);
    }
    if (liveness_.may_judge(now))
      for (auto& id : silent_ids)
        if (!nodes_->dead(id)) node_died(id);
    size_t members = nodes_->all().size();
    // Every node's free resources are read again at most every 250 ms, less often in a large
    // cluster (a quarter of a millisecond per node): joins and leaves are seen at once (they
    // read everything), and a placement that finds a node fuller than its view says reads it
    // again.
    auto every = std::max(std::chrono::microseconds(250'000), std::chrono::microseconds(250 * members));
    if (now - last_refresh_ >= every) {
      nodes_->refresh_free();
      last_refresh_ = now;
    } else {
      nodes_->refresh_if_joined();
    }
    check_drains();
  } catch (const std::exception& e) {
    spdlog::error("checking nodes: {}", e.what());
  }
}

// Marked in its record, announced on "yard:events", its resources withdrawn, its actors restarted
// elsewhere (as far as their max_restarts allow) and its placement-group bundles placed again.
void HeadService::node_died(const std::string& id) {
  if (metrics_) metrics_->heartbeat_missed(id);
  nodes_->mark_dead(id);
  double now = unix_time();
  unregister_resources(*redis_, id);
  tables_->nodes.set_state(id, store::NodeState::kDead, now);
  tables_->cluster.set_lease_demand(id, "");
  publish(json{{"type", "node_dead"}, {"node_id", id}, {"time", now}}.dump());
  spdlog::warn("node {}: its heartbeat expired: marked dead", id);
  actors_->node_died(id);
  groups_->node_died(id);
  job_requests_->node_lost(id);
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
  drain(id, std::chrono::milliseconds(d.getTimeoutMs()), d.getForce() || d.getNotice(), in.routing_id,
        in.msg->env().getRequestId());
  // A notice: the node goes at the timeout whatever runs there. Its room has left the pool (the
  // drain); the queue's jobs there get ready now.
  if (d.getNotice()) {
    double deadline = unix_time() + d.getTimeoutMs() / 1000.0;
    publish(json{{"type", "node_notice"}, {"node_id", id}, {"deadline", deadline}, {"time", unix_time()}}.dump());
    spdlog::warn("node {} goes in {:.0f} s (a notice)", id, d.getTimeoutMs() / 1000.0);
    queue_->notice(id, deadline);
  }
}

void HeadService::drain(const std::string& id, std::chrono::milliseconds timeout, bool force,
                        const std::string& routing, uint64_t req) {
  nodes_->start_drain(id);
  tables_->nodes.set_state(id, store::NodeState::kDraining);
  publish(json{{"type", "node_draining"}, {"node_id", id}, {"time", unix_time()}}.dump());
  spdlog::info("draining node {}", id);
  move_off(id);
  drains_.push_back({id, routing, req, Clock::now() + timeout, force});
  actors_->process();
}

// Actors on a draining node that may restart are placed elsewhere now; bundles nothing uses
// there are placed again.
void HeadService::move_off(const std::string& id) {
  actors_->move_off(id);
  groups_->move_off(id, [this](const std::string& group, int bundle) { return actors_->uses_bundle(group, bundle); });
}

void HeadService::check_drains() {
  auto now = Clock::now();
  for (auto it = drains_.begin(); it != drains_.end();) {
    auto& d = *it;
    std::vector<std::string> left = actors_->on_node(d.node);
    long leased = 0;
    try {
      leased = tables_->nodes.leased_workers(d.node);
    } catch (...) {
    }
    bool gone = nodes_->dead(d.node) || !nodes_->find(d.node);
    bool idle = left.empty() && leased == 0;
    if (!gone && !idle && now < d.deadline) {
      ++it;
      continue;
    }
    if (!gone && !idle && !d.force && d.routing.empty()) {  // nobody waits: the node stays
      spdlog::warn("node {} is still busy at the end of its drain: it stays", d.node);
      it = drains_.erase(it);
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
    for (auto& aid : left) actors_->stop(aid, "its node " + d.node + " was drained");
    if (!gone) ask_to_stop(nodes_->address(d.node));
    nodes_->end_drain(d.node);
    spdlog::info("node {} drained", d.node);
    publish(json{{"type", "node_drained"}, {"node_id", d.node}, {"time", unix_time()}}.dump());
    if (!d.routing.empty()) {
      OutMessage m(token_, d.req, true);
      m.env().getBody().setOk();
      io_->reply(d.routing, m.finish());
    }
    it = drains_.erase(it);
  }
}

}  // namespace yard::sched
