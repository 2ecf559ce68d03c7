// The failure detector and drains (node_watch.h).
#include "head/node_watch.h"

#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "resources.h"
#include "yard/internal/redis.h"
#include "yard/process.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

NodeWatch::NodeWatch(Context c)
    : c_(std::move(c)),
      liveness_(std::chrono::milliseconds(static_cast<long>(c_.heartbeat_timeout_s * 1000)), kCheckPeriod) {}

// The failure detector: a node whose heartbeat key expired is dead. It is marked in its record,
// announced on "yard:events", its resources are withdrawn, its actors restart elsewhere (as far as
// their max_restarts allow) and its placement-group bundles are placed again. After the control
// store was away or this process (or the store) stalled, nodes get one full timeout to heartbeat
// again before anyone is declared dead (policy::Liveness).
void NodeWatch::check() {
  // Without a valid lease this head may not act on what it sees (a standby may lead by now); the
  // check after the gap sees a stall and gives every node a full timeout.
  if (!c_.may_act()) return;
  try {
    // The members without a heartbeat, found by one script in Redis: the head reads only those.
    auto silent_ids = c_.tables.nodes.silent();
    auto now = Clock::now();
    bool reconnected = c_.redis.reconnects() != seen_reconnects_;
    seen_reconnects_ = c_.redis.reconnects();
    switch (liveness_.observe(now, reconnected)) {
      case policy::Liveness::Pause::kReconnected:
        spdlog::warn("reconnected to Redis: no node is declared dead for {} s", c_.heartbeat_timeout_s);
        break;
      case policy::Liveness::Pause::kStalled:
        spdlog::warn("the failure detector ran {:.1f} s after its last check (this process or Redis stalled): no "
                     "node is declared dead for {} s",
                     std::chrono::duration<double>(liveness_.last_gap()).count(), c_.heartbeat_timeout_s);
        break;
      case policy::Liveness::Pause::kNone:
        break;
    }
    std::set<std::string> silent(silent_ids.begin(), silent_ids.end());
    auto dead = c_.nodes.dead_ids();  // a copy: marking one alive changes the set
    for (auto& id : dead) {
      if (silent.count(id) || !c_.nodes.find(id)) continue;
      // Back (a healed partition, a paused process): it fences itself and rejoins empty.
      c_.nodes.mark_alive(id);
      c_.tables.nodes.set_state(id, store::NodeState::kAlive);
      c_.publish(json{{"type", "node_alive"}, {"node_id", id}, {"time", unix_time()}}.dump());
      spdlog::warn("node {} is heartbeating again", id);
    }
    if (liveness_.may_judge(now))
      for (auto& id : silent_ids)
        if (!c_.nodes.dead(id)) node_died(id);
    size_t members = c_.nodes.all().size();
    // Every node's free resources are read again at most every 250 ms, less often in a large
    // cluster (a quarter of a millisecond per node): joins and leaves are seen at once (they
    // read everything), and a placement that finds a node fuller than its view says reads it
    // again.
    auto every = std::max(std::chrono::microseconds(250'000), std::chrono::microseconds(250 * members));
    if (now - last_refresh_ >= every) {
      c_.nodes.refresh_free();
      last_refresh_ = now;
    } else {
      c_.nodes.refresh_if_joined();
    }
    check_drains();
  } catch (const std::exception& e) {
    spdlog::error("checking nodes: {}", e.what());
  }
}

// Marked in its record, announced on "yard:events", its resources withdrawn, its actors restarted
// elsewhere (as far as their max_restarts allow) and its placement-group bundles placed again.
void NodeWatch::node_died(const std::string& id) {
  if (c_.missed) c_.missed(id);
  c_.nodes.mark_dead(id);
  double now = unix_time();
  unregister_resources(c_.redis, id);
  c_.tables.nodes.set_state(id, store::NodeState::kDead, now);
  c_.tables.cluster.set_lease_demand(id, "");
  c_.publish(json{{"type", "node_dead"}, {"node_id", id}, {"time", now}}.dump());
  spdlog::warn("node {}: its heartbeat expired: marked dead", id);
  c_.actors.node_died(id);
  c_.groups.node_died(id);
  c_.job_requests.node_lost(id);
}

// ---- draining ---------------------------------------------------------------------------------

// `yard drain NODE`: nothing new goes there; actors that may restart move elsewhere now (without
// using up their restarts); the rest, and leased task workers, are waited for. Then the node is
// told to stop, and leaves the cluster.
void NodeWatch::on_drain(Incoming& in) {
  auto d = in.msg->env().getBody().getDrainNode();
  std::string id = d.getNodeId();
  if (id == c_.head_node) {
    c_.reply.error(in, wire::ErrorCode::BAD_REQUEST, "node " + id + " is the head's; stop the cluster instead (yard stop)");
    return;
  }
  if (!c_.nodes.find(id) || c_.nodes.dead(id)) {
    c_.reply.error(in, wire::ErrorCode::NOT_FOUND, "no live node " + id + " (yard status lists the nodes)");
    return;
  }
  drain(id, std::chrono::milliseconds(d.getTimeoutMs()), d.getForce() || d.getNotice(), in.routing_id,
        in.msg->env().getRequestId());
  // A notice: the node goes at the timeout whatever runs there. Its room has left the pool (the
  // drain); the queue's jobs there get ready now.
  if (d.getNotice()) {
    double deadline = unix_time() + d.getTimeoutMs() / 1000.0;
    c_.publish(json{{"type", "node_notice"}, {"node_id", id}, {"deadline", deadline}, {"time", unix_time()}}.dump());
    spdlog::warn("node {} goes in {:.0f} s (a notice)", id, d.getTimeoutMs() / 1000.0);
    c_.queue.notice(id, deadline);
  }
}

void NodeWatch::drain(const std::string& id, std::chrono::milliseconds timeout, bool force,
                        const std::string& routing, uint64_t req) {
  c_.nodes.start_drain(id);
  c_.tables.nodes.set_state(id, store::NodeState::kDraining);
  c_.publish(json{{"type", "node_draining"}, {"node_id", id}, {"time", unix_time()}}.dump());
  spdlog::info("draining node {}", id);
  move_off(id);
  drains_.push_back({id, routing, req, Clock::now() + timeout, force});
  c_.actors.process();
}

// Actors on a draining node that may restart are placed elsewhere now; bundles nothing uses
// there are placed again.
void NodeWatch::move_off(const std::string& id) {
  c_.actors.move_off(id);
  c_.groups.move_off(id, [this](const std::string& group, int bundle) { return bundle_in_use(c_.actors.all(), group, bundle); });
}

void NodeWatch::check_drains() {
  auto now = Clock::now();
  for (auto it = drains_.begin(); it != drains_.end();) {
    auto& d = *it;
    std::vector<std::string> left = actors_on_node(c_.actors.all(), d.node);
    long leased = 0;
    try {
      leased = c_.tables.nodes.leased_workers(d.node);
    } catch (...) {
    }
    bool gone = c_.nodes.dead(d.node) || !c_.nodes.find(d.node);
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
      c_.reply.error(d.routing, d.req, wire::ErrorCode::TIMEOUT,
                  "node " + d.node + " is still busy (" + std::to_string(left.size()) + " actors" +
                      (ids.empty() ? "" : ": " + ids) + "; " + std::to_string(leased) +
                      " leased task workers); it takes no new work. Wait longer, or stop them with --force");
      it = drains_.erase(it);
      continue;
    }
    for (auto& aid : left) c_.actors.stop(aid, "its node " + d.node + " was drained");
    if (!gone) c_.stop_node(c_.nodes.address(d.node));
    c_.nodes.end_drain(d.node);
    spdlog::info("node {} drained", d.node);
    c_.publish(json{{"type", "node_drained"}, {"node_id", d.node}, {"time", unix_time()}}.dump());
    if (!d.routing.empty()) {
      OutMessage m(c_.token, d.req, true);
      m.env().getBody().setOk();
      c_.io.reply(d.routing, m.finish());
    }
    it = drains_.erase(it);
  }
}

}  // namespace yard::sched
