// Placement groups: bundles of resources reserved together (PACK, SPREAD, STRICT_*), placed by
// the bundle policy and taken in one atomic script, placed again when a node goes.
#include "head/head_service.h"

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched {

using namespace detail;

void HeadService::save_pg(const PGroup& g) { tables_->save_group(g); }

// Places the group's unplaced bundles: plans on the cached view, then takes everything in one
// atomic script. False when it does not fit now (it is tried again as resources free up).
policy::Decision HeadService::try_place_pg(PGroup& g, bool check_feasible) {
  policy::GroupRequest req;
  req.bundles = g.bundles;
  req.strategy = g.strategy;
  req.placed = g.nodes;
  req.check_feasible = check_feasible;
  auto plan = policy::place_bundles(nodes_->view(), req);
  if (plan.outcome == policy::Outcome::kInfeasible) return policy::Decision::infeasible(plan.why);
  if (plan.outcome == policy::Outcome::kWait) return policy::Decision::wait();
  ClusterNodes::Items items;
  for (size_t i = 0; i < g.bundles.size(); ++i)
    if (g.nodes[i].empty()) items.emplace_back(plan.nodes[i], g.bundles[i]);
  if (items.empty()) {
    g.state = store::GroupState::kCreated;
    save_pg(g);
    return policy::Decision::placed({});
  }
  // The group's record says CREATED in the same atomic step that takes the resources.
  store::GroupRecord created = g;
  created.state = store::GroupState::kCreated;
  created.nodes = plan.nodes;
  if (nodes_->reserve(items, store::Tables::group_fields(created))) return policy::Decision::wait();
  for (size_t i = 0; i < g.bundles.size(); ++i)
    if (g.nodes[i].empty()) {
      g.nodes[i] = plan.nodes[i];
      g.bundle_avail[i] = g.bundles[i];
    }
  g.state = store::GroupState::kCreated;
  answer_pg_waiters(g);
  process_actors();
  return policy::Decision::placed({});
}

void HeadService::answer_pg_waiters(PGroup& g) {
  auto now = Clock::now();
  for (auto it = g.waiters.begin(); it != g.waiters.end();) {
    bool done = g.state == store::GroupState::kCreated || g.state == store::GroupState::kRemoved;
    if (!done && it->deadline > now) {
      ++it;
      continue;
    }
    OutMessage m(token_, it->req, true);
    auto info = m.env().getBody().initPlacementGroupInfo();
    info.setGroupId(g.id);
    info.setState(store::name(g.state));
    auto ns = info.initBundleNodes(static_cast<unsigned>(g.nodes.size()));
    for (unsigned i = 0; i < g.nodes.size(); ++i) ns.set(i, g.nodes[i]);
    io_->reply(it->routing, m.finish());
    it = g.waiters.erase(it);
  }
}

void HeadService::on_create_pg(Incoming& in) {
  auto c = in.msg->env().getBody().getCreatePlacementGroup();
  PGroup g;
  g.id = c.getGroupId();
  g.job = c.getJobId();
  g.name = c.getName();
  std::string strategy = c.getStrategy();
  auto parsed = policy::parse_bundle_strategy(strategy.empty() ? "PACK" : strategy);
  if (!parsed) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, "unknown placement strategy '" + strategy +
                                                      "' (PACK, SPREAD, STRICT_PACK or STRICT_SPREAD)");
    return;
  }
  g.strategy = *parsed;
  if (g.id.empty() || pgs_.count(g.id)) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, "placement group id missing or already used");
    return;
  }
  if (!jobs_->running(g.job)) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "job " + g.job + " is not running");
    return;
  }
  if (c.getBundles().size() == 0) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, "a placement group needs at least one bundle");
    return;
  }
  for (auto b : c.getBundles()) {
    Res r;
    if (auto bad = read_resources(b.getResources(), r)) {
      reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
      return;
    }
    g.bundles.push_back(r);
  }
  g.bundle_avail.assign(g.bundles.size(), Res{});
  g.nodes.assign(g.bundles.size(), "");
  g.created_at = unix_time();
  auto placed = try_place_pg(g, true);
  if (placed.outcome == policy::Outcome::kInfeasible) {
    reply_.error(in, wire::ErrorCode::INFEASIBLE, "placement group " + g.id + " (" + policy::name(g.strategy) + ", " +
                                                     std::to_string(g.bundles.size()) + " bundles) cannot be placed: " + placed.why);
    return;
  }
  if (g.state == store::GroupState::kPending) save_pg(g);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto info = m.env().getBody().initPlacementGroupInfo();
  info.setGroupId(g.id);
  info.setState(store::name(g.state));
  auto ns = info.initBundleNodes(static_cast<unsigned>(g.nodes.size()));
  for (unsigned i = 0; i < g.nodes.size(); ++i) ns.set(i, g.nodes[i]);
  std::string id = g.id;
  pgs_.emplace(id, std::move(g));
  io_->reply(in.routing_id, m.finish());
}

void HeadService::on_wait_pg(Incoming& in) {
  auto w = in.msg->env().getBody().getWaitPlacementGroup();
  auto it = pgs_.find(w.getGroupId());
  if (it == pgs_.end()) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + std::string(w.getGroupId()));
    return;
  }
  it->second.waiters.push_back({in.routing_id, in.msg->env().getRequestId(),
                                Clock::now() + std::chrono::milliseconds(w.getTimeoutMs())});
  answer_pg_waiters(it->second);
}

void HeadService::remove_pg(PGroup& g, const std::string& why) {
  if (g.state == store::GroupState::kRemoved) return;
  for (auto& [id, a] : actors_)
    if (a.pg == g.id && a.state != store::ActorState::kDead) {
      a.killed = true;
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its placement group " + g.id + " was removed (" + why + ")");
    }
  ClusterNodes::Items items;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].empty()) items.emplace_back(g.nodes[i], g.bundles[i]);
  std::vector<std::string> keys{store::Tables::group_key(g.id)};
  for (size_t i = 0; i < g.bundles.size(); ++i) keys.push_back(bundle_key(g.id, static_cast<int>(i)));
  // Removal costs no Redis round trip of its own: it rides on the next reservation.
  nodes_->release_later(items, keys);
  g.state = store::GroupState::kRemoved;
  answer_pg_waiters(g);
}

void HeadService::on_remove_pg(Incoming& in) {
  std::string id = in.msg->env().getBody().getRemovePlacementGroup();
  auto it = pgs_.find(id);
  if (it == pgs_.end()) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + id);
    return;
  }
  remove_pg(it->second, "removed by request");
  pgs_.erase(it);
  reply_.ok(in);
  process_actors();
}

// ---- status -----------------------------------------------------------------------------------

}  // namespace yard::sched
