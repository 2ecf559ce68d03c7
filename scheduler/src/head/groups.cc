#include "head/groups.h"

#include <spdlog/spdlog.h>

#include "resources.h"
#include "yard/process.h"
#include "yard/internal/redis.h"

namespace yard::sched {

using namespace detail;

// Plans on the cached view, then takes everything in one atomic script. Wait when it does not fit
// now (it is tried again as resources free up).
policy::Decision GroupManager::try_place(Group& g, bool check_feasible) {
  policy::GroupRequest req;
  req.bundles = g.bundles;
  req.strategy = g.strategy;
  req.placed = g.nodes;
  req.check_feasible = check_feasible;
  // A new group may need a node that joined a moment ago: a view checked in the last 50 ms is
  // taken as it is unless the group does not fit it.
  bool checked = !check_feasible || nodes_.refresh_if_joined(kJoinCheckAge);
  auto plan = policy::place_bundles(nodes_.view(), req);
  if (plan.outcome == policy::Outcome::kInfeasible && !checked && nodes_.refresh_if_joined())
    plan = policy::place_bundles(nodes_.view(), req);
  if (plan.outcome == policy::Outcome::kInfeasible) return wait_for_nodes(g, req, plan.why);
  g.wait_why.reset();
  if (plan.outcome == policy::Outcome::kWait) return policy::Decision::wait();
  ClusterNodes::Items items;
  for (size_t i = 0; i < g.bundles.size(); ++i)
    if (g.nodes[i].empty()) items.emplace_back(plan.nodes[i], g.bundles[i]);
  if (items.empty()) {
    g.state = store::GroupState::kCreated;
    save(g);
    return policy::Decision::placed({});
  }
  // The group's record says CREATED in the same atomic step that takes the resources.
  store::GroupRecord created = g;
  created.state = store::GroupState::kCreated;
  created.nodes = plan.nodes;
  if (nodes_.reserve(items, store::Groups::fields_of(created))) return policy::Decision::wait();
  for (size_t i = 0; i < g.bundles.size(); ++i)
    if (g.nodes[i].empty()) {
      g.nodes[i] = plan.nodes[i];
      g.bundle_avail[i] = g.bundles[i];
    }
  g.state = store::GroupState::kCreated;
  answer_waiters(g);
  if (on_placed) on_placed();
  return policy::Decision::placed({});
}

// A group no arrangement of the running nodes can hold (`why`) waits for nodes that can (the
// autoscaler starts them, or they join) unless the cluster fails such groups at once.
policy::Decision GroupManager::wait_for_nodes(Group& g, const policy::GroupRequest& req, const std::string& why) {
  bool had = g.wait_why.has_value();
  g.wait_why = policy::wait_for_nodes(could_add_nodes && could_add_nodes(req), infeasible_waits && infeasible_waits(), why);
  if (!g.wait_why) return policy::Decision::infeasible(why);
  if (!had) g.waiting_since = Clock::now();
  return policy::Decision::wait();
}

void GroupManager::reply_info(const std::string& routing, uint64_t req, const Group& g) {
  OutMessage m(token_, req, true);
  auto info = m.env().getBody().initPlacementGroupInfo();
  info.setGroupId(g.id);
  info.setState(detail::to_wire(g.state));
  auto ns = info.initBundleNodes(static_cast<unsigned>(g.nodes.size()));
  for (unsigned i = 0; i < g.nodes.size(); ++i) ns.set(i, g.nodes[i]);
  if (g.wait_why && g.state == store::GroupState::kPending) info.setWaiting(policy::text(*g.wait_why));
  io_.reply(routing, m.finish());
}

void GroupManager::answer_waiters(Group& g) {
  auto now = Clock::now();
  bool done = g.state == store::GroupState::kCreated || g.state == store::GroupState::kRemoved;
  for (auto it = g.waiters.begin(); it != g.waiters.end();) {
    if (!done && it->deadline > now) {
      ++it;
      continue;
    }
    reply_info(it->routing, it->req, g);
    it = g.waiters.erase(it);
  }
}

namespace {
// A strategy from the wire; nullopt for one this build does not know.
std::optional<policy::BundleStrategy> bundle_strategy(wire::PlacementStrategy s) {
  switch (s) {
    case wire::PlacementStrategy::PACK: return policy::BundleStrategy::kPack;
    case wire::PlacementStrategy::SPREAD: return policy::BundleStrategy::kSpread;
    case wire::PlacementStrategy::STRICT_PACK: return policy::BundleStrategy::kStrictPack;
    case wire::PlacementStrategy::STRICT_SPREAD: return policy::BundleStrategy::kStrictSpread;
  }
  return std::nullopt;
}
}  // namespace

void GroupManager::on_create(Incoming& in) {
  auto c = in.msg->env().getBody().getCreatePlacementGroup();
  Group g;
  g.id = c.getGroupId();
  g.job = c.getJobId();
  g.name = c.getName();
  g.ns = c.getNamespace();
  if (g.ns.empty()) g.ns = g.job;  // a creator from before namespaces: its job's own
  auto parsed = bundle_strategy(c.getStrategy());
  if (!parsed)
    return reply_.error(in, wire::ErrorCode::BAD_REQUEST,
                        "unknown placement strategy " + std::to_string(static_cast<int>(c.getStrategy())) +
                            " (PACK, SPREAD, STRICT_PACK or STRICT_SPREAD)");
  g.strategy = *parsed;
  if (g.id.empty() || groups_.count(g.id))
    return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "placement group id missing or already used");
  if (!jobs_.running(g.job)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "job " + g.job + " is not running");
  // A name names one live group of its namespace (as Ray's).
  if (!g.name.empty())
    for (auto& [id, other] : groups_)
      if (other.name == g.name && other.ns == g.ns && other.state != store::GroupState::kRemoved)
        return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "a placement group named '" + g.name +
                                                                  "' exists already in namespace '" + g.ns + "' (" + id +
                                                                  "); remove it first");
  if (c.getBundles().size() == 0)
    return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "a placement group needs at least one bundle");
  for (auto b : c.getBundles()) {
    Res r;
    if (auto bad = read_resources(b.getResources(), r)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
    g.bundles.push_back(r);
  }
  g.bundle_avail.assign(g.bundles.size(), Res{});
  g.nodes.assign(g.bundles.size(), "");
  g.created_at = unix_time();
  auto placed = try_place(g, true);
  if (placed.outcome == policy::Outcome::kInfeasible)
    return reply_.error(in, wire::ErrorCode::INFEASIBLE,
                        "placement group " + g.id + " (" + policy::name(g.strategy) + ", " +
                            std::to_string(g.bundles.size()) + " bundles) cannot be placed: " + placed.why);
  if (g.state == store::GroupState::kPending) save(g);
  if (g.wait_why) spdlog::warn("placement group {} waits: {}", g.id, policy::text(*g.wait_why));
  reply_info(in.routing_id, in.msg->env().getRequestId(), g);
  std::string id = g.id;
  groups_.emplace(id, std::move(g));
}

void GroupManager::on_wait(Incoming& in) {
  auto w = in.msg->env().getBody().getWaitPlacementGroup();
  auto it = groups_.find(w.getGroupId());
  if (it == groups_.end())
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + std::string(w.getGroupId()));
  it->second.waiters.push_back({in.routing_id, in.msg->env().getRequestId(),
                                Clock::now() + std::chrono::milliseconds(w.getTimeoutMs())});
  answer_waiters(it->second);
}

void GroupManager::remove(Group& g, const std::string& why) {
  if (g.state == store::GroupState::kRemoved) return;
  if (on_removed) on_removed(g.id, why);
  ClusterNodes::Items items;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].empty()) items.emplace_back(g.nodes[i], g.bundles[i]);
  std::vector<std::string> keys{store::Groups::key(g.id)};
  for (size_t i = 0; i < g.bundles.size(); ++i) keys.push_back(bundle_key(g.id, static_cast<int>(i)));
  // Removal costs no Redis round trip of its own: it rides on the next reservation.
  nodes_.release_later(items, keys);
  g.state = store::GroupState::kRemoved;
  answer_waiters(g);
}

void GroupManager::on_remove(Incoming& in) {
  std::string id = in.msg->env().getBody().getRemovePlacementGroup();
  auto it = groups_.find(id);
  if (it == groups_.end()) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + id);
  remove(it->second, "removed by request");
  groups_.erase(it);
  reply_.ok(in);
  if (on_placed) on_placed();  // the resources it held are free for waiting actors
}

void GroupManager::tick() {
  for (auto it = groups_.begin(); it != groups_.end();)
    it = it->second.state == store::GroupState::kRemoved ? groups_.erase(it) : std::next(it);
  for (auto& [id, g] : groups_) {
    // A group waiting for nodes that can hold it is checked whole: its reason follows the nodes.
    if (g.state == store::GroupState::kPending || g.state == store::GroupState::kRescheduling)
      (void)try_place(g, g.wait_why.has_value());
    answer_waiters(g);
  }
}

void GroupManager::node_died(const std::string& node) {
  for (auto& [gid, g] : groups_) {
    bool hit = false;
    for (auto& n : g.nodes)
      if (n == node) {
        n.clear();
        hit = true;
      }
    if (hit && g.state == store::GroupState::kCreated) {
      g.state = store::GroupState::kRescheduling;
      save(g);
    }
  }
}

void GroupManager::move_off(const std::string& node, const std::function<bool(const std::string&, int)>& used) {
  for (auto& [gid, g] : groups_) {
    bool hit = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i] != node || used(gid, static_cast<int>(i))) continue;  // a used one waits for its actors
      nodes_.release_later({{node, g.bundles[i]}}, {});
      g.nodes[i].clear();
      g.bundle_avail[i].clear();
      hit = true;
    }
    if (hit && g.state == store::GroupState::kCreated) g.state = store::GroupState::kRescheduling;
  }
}

std::vector<policy::Demand> GroupManager::pending_demand() const {
  std::vector<policy::Demand> out;
  for (auto& [id, g] : groups_) {
    if (g.state != store::GroupState::kPending && g.state != store::GroupState::kRescheduling) continue;
    if (g.strategy == policy::BundleStrategy::kStrictPack) {
      Res sum;
      for (size_t i = 0; i < g.bundles.size(); ++i)
        if (g.nodes[i].empty()) add(sum, g.bundles[i]);
      if (!sum.empty()) out.push_back({sum, "group " + id, false, id});
      continue;
    }
    bool own = g.strategy == policy::BundleStrategy::kStrictSpread;
    for (size_t i = 0; i < g.bundles.size(); ++i)
      if (g.nodes[i].empty()) out.push_back({g.bundles[i], "group " + id + " bundle " + std::to_string(i), own, id});
  }
  return out;
}

void GroupManager::job_ended(const std::string& job) {
  for (auto& [id, g] : groups_)
    if (g.job == job && g.state != store::GroupState::kRemoved) remove(g, "its job " + job + " ended");
}

std::optional<Rejection> GroupManager::check_actor(const std::string& group, int bundle, const Res& need,
                                                   const std::string& class_name) const {
  auto g = groups_.find(group);
  if (g == groups_.end() || g->second.state == store::GroupState::kRemoved)
    return Rejection{wire::ErrorCode::NOT_FOUND, "no placement group " + group};
  auto& b = g->second.bundles;
  if (bundle >= static_cast<int>(b.size()) || bundle < -1)
    return Rejection{wire::ErrorCode::BAD_REQUEST, "placement group " + group + " has " + std::to_string(b.size()) +
                                                       " bundles; there is no bundle " + std::to_string(bundle)};
  for (int i = 0; i < static_cast<int>(b.size()); ++i)
    if ((bundle < 0 || bundle == i) && fits(need, b[static_cast<size_t>(i)])) return std::nullopt;
  return Rejection{wire::ErrorCode::INFEASIBLE, "actor " + class_name + " (" + res_text(need) +
                                                    ") does not fit in placement group " + group +
                                                    (bundle >= 0 ? " bundle " + std::to_string(bundle) : "")};
}

bool GroupManager::gone(const std::string& group) const {
  auto g = groups_.find(group);
  return g == groups_.end() || g->second.state == store::GroupState::kRemoved;
}

std::optional<std::pair<int, std::string>> GroupManager::take(const std::string& group, int want, const Res& need) {
  auto& g = groups_.at(group);
  for (int i = 0; i < static_cast<int>(g.bundles.size()); ++i) {
    auto b = static_cast<size_t>(i);
    if ((want >= 0 && want != i) || g.nodes[b].empty() || !fits(need, g.bundles[b])) continue;
    // The bundle's free resources are shared with tasks in it (leased by its node): the count in
    // Redis decides, not this process's view.
    if (!reserve_bundle(redis_, bundle_key(g.id, i), g.bundles[b], need)) {
      g.bundle_avail[b] = read_res(redis_, bundle_key(g.id, i));
      continue;
    }
    sub(g.bundle_avail[b], need);
    return std::make_pair(i, g.nodes[b]);
  }
  return std::nullopt;
}

void GroupManager::give_back(const std::string& group, int bundle, const Res& res) {
  auto g = groups_.find(group);
  if (g == groups_.end() || bundle < 0 || bundle >= static_cast<int>(g->second.bundle_avail.size())) return;
  add(g->second.bundle_avail[static_cast<size_t>(bundle)], res);
  try {
    release_bundle(redis_, bundle_key(group, bundle), res);
  } catch (const std::exception& e) {
    spdlog::error("giving back bundle {} of {}: {}", bundle, group, e.what());
  }
}

// Groups are found by their keys (a set of ids would cost every creation and removal a round trip).
void GroupManager::rebuild() {
  for (auto& id : tables_.groups.ids()) {
    auto rec = tables_.groups.get(id);
    if (!rec) continue;
    Group g;
    static_cast<store::GroupRecord&>(g) = std::move(*rec);
    g.nodes.resize(g.bundles.size());
    g.bundle_avail = g.bundles;
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      auto used = read_res(redis_, bundle_key(id, static_cast<int>(i)));
      if (!used.empty()) g.bundle_avail[i] = used;
      if (g.nodes[i].empty()) g.bundle_avail[i].clear();
    }
    groups_.emplace(id, std::move(g));
  }
}

std::map<std::string, int> GroupManager::counts() const {
  std::map<std::string, int> n;
  for (auto& [id, g] : groups_) ++n[store::name(g.state)];
  return n;
}

nlohmann::json GroupManager::status() const {
  auto out = nlohmann::json::array();
  for (auto& [id, g] : groups_) {
    out.push_back({{"placement_group_id", id}, {"name", g.name}, {"job", g.job}, {"namespace", g.ns}, {"strategy", policy::name(g.strategy)},
                   {"state", store::name(g.state)}, {"bundles", g.bundles}, {"bundle_nodes", g.nodes}});
    if (g.wait_why) out.back()["waiting"] = policy::text(*g.wait_why);
  }
  return out;
}

nlohmann::json GroupManager::waiting() const {
  auto out = nlohmann::json::array();
  auto now = Clock::now();
  for (auto& [id, g] : groups_) {
    if (!g.wait_why || g.state != store::GroupState::kPending) continue;
    out.push_back({{"kind", "placement_group"}, {"id", id}, {"what", g.name.empty() ? policy::name(g.strategy) : g.name},
                   {"job", g.job}, {"needs", g.bundles}, {"reason", policy::name(g.wait_why->reason)},
                   {"detail", g.wait_why->detail}, {"text", policy::text(*g.wait_why)}, {"for_s", std::chrono::duration<double>(now - g.waiting_since).count()}});
  }
  return out;
}

}  // namespace yard::sched
