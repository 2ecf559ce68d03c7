// The actor manager: where each actor runs (placement across nodes, in placement groups),
// restarts, lookups by id and name, and the dead it still remembers.
#include "head/actors.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/errors.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

namespace {
// The node a DEFAULT actor goes to first: its creator's (the head's node when unknown).
const std::string& first_choice(const std::string& caller_node, const std::string& head_node) {
  return caller_node.empty() ? head_node : caller_node;
}
}  // namespace

policy::Decision ActorManager::pick_node(const Actor& a, const policy::ClusterView& view) const {
  policy::ActorRequest r;
  r.resources = a.resources;
  r.strategy = a.strategy;
  r.affinity_node = a.affinity_node;
  r.soft = a.soft;
  r.local_node = first_choice(a.caller_node, head_node_);
  return policy::place_actor(view, r);
}

bool ActorManager::answer_repeated_creation(Incoming& in) {
  auto ca = in.msg->env().getBody().getCreateActor();
  auto it = actors_.find(ca.getActorId());
  if (it == actors_.end() || it->second.job != std::string(ca.getJobId()) ||
      it->second.class_name != std::string(ca.getClassName()))
    return false;
  auto& a = it->second;
  if (a.state == store::ActorState::kAlive || a.state == store::ActorState::kDead) {
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    if (a.state == store::ActorState::kDead)
      set_error(m.env(), wire::ErrorCode::ACTOR_DIED, a.cause);
    else
      fill_actor_info(m.env().getBody().initActorInfo(), a);
    io_.reply(in.routing_id, m.finish());
  } else {
    lookups_.wait(a.id, in, kCreationWait);
  }
  return true;
}

std::optional<Rejection> ActorManager::check_new_actor(Actor& a) {
  if (a.id.empty() || a.class_name.empty() || actors_.count(a.id))
    return Rejection{wire::ErrorCode::BAD_REQUEST, "actor id missing or already used"};
  if (!a.pg.empty()) {
    if (auto no = groups_->check_actor(a.pg, a.bundle, a.resources, a.class_name)) return no;
  } else {
    nodes_->refresh_if_joined(kJoinCheckAge);  // an infeasible one reads everything below
    // Without node affinity an actor is feasible when some node's totals hold it: known per
    // shape of request until the view is rebuilt, so that a burst of alike actors costs one scan.
    if (a.affinity_node.empty() && nodes_->fits_some_node(a.resources)) return check_name(a);
    auto d = pick_node(a, nodes_->view());
    if (d.outcome == policy::Outcome::kInfeasible) {
      nodes_->refresh();  // a node that can take it may have joined a moment ago
      d = pick_node(a, nodes_->view());
    }
    if (d.outcome == policy::Outcome::kInfeasible && !wait_for_node(a, d.why))
      return Rejection{wire::ErrorCode::INFEASIBLE,
                       "actor " + a.class_name + " cannot be placed on any node (" + d.why + ")"};
  }
  return check_name(a);
}

std::optional<Rejection> ActorManager::check_name(const Actor& a) const {
  if (!a.name.empty()) {
    auto n = actor_names_.find({a.ns, a.name});
    if (n != actor_names_.end() && actors_.count(n->second) && actors_.at(n->second).state != store::ActorState::kDead)
      return Rejection{wire::ErrorCode::BAD_REQUEST,
                       "an actor named '" + a.name + "' already exists in namespace '" + a.ns + "' (" + n->second + ")"};
  }
  return std::nullopt;
}

// Where an actor's name is recorded in the control store (yard:actor_names, for people who look).
std::string ActorManager::name_field(const Actor& a) { return a.ns + "/" + a.name; }

void ActorManager::on_create(Incoming& in) {
  auto ca = in.msg->env().getBody().getCreateActor();
  std::string job = ca.getJobId();
  if (!jobs_->running(job)) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "job " + job + " is not running");
    return;
  }
  if (answer_repeated_creation(in)) return;
  Actor a;
  a.id = ca.getActorId();
  a.class_name = ca.getClassName();
  a.name = ca.getName();
  a.job = job;
  a.ns = ca.getNamespace();
  if (a.ns.empty()) a.ns = job;  // a creator from before namespaces: its job's own
  a.owner = ca.getOwnerActor();
  a.max_restarts = ca.getMaxRestarts();
  a.affinity_node = ca.getNodeId();
  a.soft = ca.getSoft();
  a.caller_node = ca.getCallerNode();
  a.pg = ca.getPlacementGroup();
  a.bundle = ca.getBundleIndex();
  // Its creator's choice, else its job's default lifetime.
  a.detached = ca.getDetached();
  if (!ca.getLifetimeChosen() && !a.detached)
    if (auto* j = jobs_->find(job)) a.detached = j->detached_actors;
  if (auto ms = ca.getInfeasibleTimeoutMs()) a.infeasible_deadline = Clock::now() + std::chrono::milliseconds(ms);
  if (auto bad = read_resources(ca.getResources(), a.resources)) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
    return;
  }
  auto strategy = policy::parse_actor_strategy(ca.getStrategy().cStr());
  if (!strategy) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST,
                "unknown scheduling strategy '" + std::string(ca.getStrategy().cStr()) + "' (DEFAULT or SPREAD)");
    return;
  }
  a.strategy = *strategy;
  if (auto no = check_new_actor(a)) {
    reply_.error(in, no->code, no->why);
    return;
  }
  if (!a.name.empty()) {
    actor_names_[{a.ns, a.name}] = a.id;
    tables_->actors.name(name_field(a), a.id);
  }
  a.creator_routing = in.routing_id;
  a.creator_req = in.msg->env().getRequestId();
  a.create_msg = std::shared_ptr<InMessage>(std::move(in.msg));
  a.place_bundle = a.bundle;
  a.bundle = -1;
  std::string id = a.id;
  auto& added = actors_.emplace(id, std::move(a)).first->second;
  lookups_.extend(id, std::chrono::seconds(300));  // its handle came to a caller before it came here
  tables_->actors.add(added, added.max_restarts != 0 ? actor_spec(added) : std::string());
  pending_actors_.push_back(id);
  process();
  answer_waiting(added);
}

void ActorManager::process() {
  for (auto it = pending_actors_.begin(); it != pending_actors_.end();) {
    auto f = actors_.find(*it);
    if (f == actors_.end() || f->second.state == store::ActorState::kDead || f->second.state == store::ActorState::kAlive || f->second.placing) {
      it = pending_actors_.erase(it);
      continue;
    }
    auto& a = f->second;
    std::string node;
    if (!a.pg.empty()) {
      if (groups_->gone(a.pg)) {
        actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its placement group " + a.pg + " was removed");
        it = pending_actors_.erase(it);
        continue;
      }
      if (auto taken = groups_->take(a.pg, a.place_bundle, a.resources)) {
        a.bundle = taken->first;
        node = taken->second;
      }
    } else {
      // The view follows every reservation (a failed one reads the node again). The node the
      // actor prefers is read again when the view says it has no room: it may have freed some.
      auto d = pick_node(a, nodes_->view());
      std::string preferred = !a.affinity_node.empty()                        ? a.affinity_node
                              : a.strategy == policy::ActorStrategy::kDefault ? first_choice(a.caller_node, head_node_)
                                                                              : std::string();
      if (!preferred.empty() && d.node != preferred && nodes_->reread(preferred)) d = pick_node(a, nodes_->view());
      if (d.outcome == policy::Outcome::kInfeasible && !a.wait_why) (void)wait_for_node(a, d.why);  // after a takeover
      if (d.outcome == policy::Outcome::kPlaced && !nodes_->reserve({{d.node, a.resources}})) {
        node = d.node;
        nodes_->count_placed(node);
      }
    }
    if (node.empty()) {
      ++it;  // waits for room (or for a feasible node to join); later ones that fit may go first
      continue;
    }
    a.waiting.clear();
    a.wait_why.reset();
    it = pending_actors_.erase(it);
    place_actor(a, node);
  }
}

std::vector<policy::Demand> ActorManager::pending_demand() const {
  std::vector<policy::Demand> out;
  for (auto& id : pending_actors_) {
    auto f = actors_.find(id);
    if (f == actors_.end()) continue;
    auto& a = f->second;
    if (a.state == store::ActorState::kDead || a.state == store::ActorState::kAlive || a.placing || !a.pg.empty() ||
        !a.affinity_node.empty())
      continue;
    out.push_back({a.resources, "actor " + a.class_name + " " + a.id, false, {}});
  }
  return out;
}

// Asks `node`'s manager to host the actor; its resources are already taken there.
void ActorManager::place_actor(Actor& a, const std::string& node) {
  a.node = node;
  a.placing = true;
  uint64_t epoch = ++a.epoch;
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto ha = m.env().getBody().initHostActor();
  ha.setNumRestarts(a.num_restarts);
  a.create_msg->rewind();  // read again at every placement
  auto src = a.create_msg->env().getBody().getCreateActor();
  auto ca = ha.initCreate();
  ca.setActorId(a.id);
  ca.setJobId(a.job);
  ca.setClassName(a.class_name);
  ca.setName(a.name);
  ca.setMaxConcurrency(src.getMaxConcurrency());
  ca.setConcurrency(src.getConcurrency());
  ca.setConcurrencyGroups(src.getConcurrencyGroups());
  ca.setDetached(a.detached);
  ca.setNamespace(a.ns);
  ca.setOwnerActor(a.owner);
  ca.setRuntimeEnv(src.getRuntimeEnv());
  auto args = ca.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], a.create_msg->value(src.getArgs()[i]));
  set_resources(ha.initResources(static_cast<unsigned>(a.resources.size())), a.resources);
  // Resources of a placement-group actor belong to its bundle, which the group gives back.
  if (a.pg.empty()) set_resources(ha.initRelease(static_cast<unsigned>(a.resources.size())), a.resources);
  std::string aid = a.id;
  spdlog::info("actor {} ({}) placed on node {}{}", a.id, a.class_name, node,
               a.num_restarts ? " (restart " + std::to_string(a.num_restarts) + ")" : "");
  io_.request(nodes_->address(node), rid, m.finish(),
               [this, aid, node, epoch](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 on_placed(aid, node, epoch, std::move(r), std::move(err));
               },
               std::chrono::seconds(150));
}

// The node's answer to hosting an actor.
void ActorManager::on_placed(const std::string& aid, const std::string& node, uint64_t epoch,
                            std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
  auto it = actors_.find(aid);
  if (it == actors_.end()) return;
  auto& a = it->second;
  if (a.epoch != epoch || !a.placing) {
    // Killed or moved meanwhile: a process that did come up there is not wanted.
    if (!err && !r->env().getBody().isError()) {
      uint64_t k = io_.next_request_id();
      OutMessage km(token_, k, false);
      km.env().getBody().setKillHosted(aid);
      notify(io_, nodes_->address(node), km.finish(), k);
    }
    return;
  }
  a.placing = false;
  if (err) {
    // Probably a node that died and is not declared dead yet: placing it again (there, until the
    // detector has spoken, then elsewhere) is worth a while.
    if (++a.unreachable < 400 && a.place_failures > 0) --a.place_failures;
    actor_lost(a, "node " + node + " could not host it: " + err->message, false);
    return;
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    // The node had no room (placed again, no restart used) or its worker was lost while
    // constructing (a restart, as a loss later would be).
    bool crashed = e.getCode() == wire::ErrorCode::WORKER_CRASHED;
    if (crashed || e.getCode() == wire::ErrorCode::UNAVAILABLE)
      return actor_lost(a, crashed ? std::string(e.getMessage()) : "node " + node + ": " + std::string(e.getMessage()), crashed);
    actor_failed(a, e.getCode() == wire::ErrorCode::TASK_ERROR ? wire::ErrorCode::ACTOR_DIED : e.getCode(),
                 e.getMessage());
    return;
  }
  actor_up(a, *r);
}

void ActorManager::actor_up(Actor& a, const InMessage& r) {
  auto info = r.env().getBody().getActorInfo();
  a.state = store::ActorState::kAlive;
  a.address = info.getAddress();
  a.worker = info.getWorkerId();
  a.node = info.getNodeId();
  a.place_failures = 0;
  if (a.max_restarts == 0) a.create_msg.reset();
  tables_->actors.save(a);
  spdlog::info("actor {} ({}) alive on node {} at {}", a.id, a.class_name, a.node, a.address);
  if (a.num_restarts)
    publish(json{{"type", "actor_restarted"}, {"actor_id", a.id}, {"node_id", a.node}, {"restarts", a.num_restarts},
                 {"time", unix_time()}}.dump());
  if (!a.replied) {
    a.replied = true;
    OutMessage m(token_, a.creator_req, true);
    fill_actor_info(m.env().getBody().initActorInfo(), a);
    io_.reply(a.creator_routing, m.finish());
  }
  lookups_.answer(a);
}

// The actor's process (or node) is gone without anyone asking: restart it if it may.
void ActorManager::actor_lost(Actor& a, const std::string& cause, bool count_restart) {
  if (a.state == store::ActorState::kDead || a.killed) return;
  free_actor_bundle(a);
  bool may = count_restart ? (a.max_restarts < 0 || static_cast<int>(a.num_restarts) < a.max_restarts)
                           : ++a.place_failures <= 3;
  if (!may || !a.create_msg) {
    actor_failed(a, wire::ErrorCode::ACTOR_DIED,
                 cause + (count_restart ? (a.max_restarts == 0 ? "" : " (no restarts left of " + std::to_string(a.max_restarts) + ")")
                                        : " (placement failed 3 times)"));
    return;
  }
  if (count_restart) ++a.num_restarts;
  a.state = a.num_restarts ? store::ActorState::kRestarting : store::ActorState::kPending;
  a.placing = false;
  a.address.clear();
  a.worker.clear();
  a.node.clear();
  a.cause = cause;
  spdlog::warn("actor {} ({}) lost: {}; restarting ({} of {})", a.id, a.class_name, cause, a.num_restarts,
               a.max_restarts < 0 ? std::string("unlimited") : std::to_string(a.max_restarts));
  try { tables_->actors.save(a); } catch (...) {}
  publish(json{{"type", "actor_restarting"}, {"actor_id", a.id}, {"cause", cause}, {"restarts", a.num_restarts},
               {"time", unix_time()}}.dump());
  pending_actors_.push_back(a.id);
  if (count_restart) bury_owned(a, "lost its process (" + cause + ")");
}

// Ray's fate-sharing: the non-detached actors an actor's code made end with that actor's
// process (its restart is a new process, which owns none of them).
void ActorManager::bury_owned(const Actor& owner, const std::string& what) {
  std::vector<Actor*> owned;
  for (auto& [id, c] : actors_)
    if (c.owner == owner.id && !c.detached && c.state != store::ActorState::kDead) owned.push_back(&c);
  for (Actor* c : owned) {
    c->killed = true;
    kill_actor_process(*c);
    actor_failed(*c, wire::ErrorCode::ACTOR_DIED,
                 "its owner, actor " + owner.id + " (" + owner.class_name + "), " + what +
                     "; an actor made by another lives only as long as it unless made detached");
  }
}

void ActorManager::actor_failed(Actor& a, wire::ErrorCode code, const std::string& cause) {
  free_actor_bundle(a);
  if (code != wire::ErrorCode::INFEASIBLE) {  // `waiting` on a dead actor says it died of waiting
    a.waiting.clear();
    a.wait_why.reset();
  }
  a.state = store::ActorState::kDead;
  a.dead_at = unix_time();
  a.cause = cause;
  a.placing = false;
  a.create_msg.reset();
  spdlog::warn("actor {} ({}) is dead: {}", a.id, a.class_name, cause);
  // Its name is free from now on: a lookup finds nothing, a new actor may take it.
  bool unnamed = false;
  if (auto n = actor_names_.find({a.ns, a.name}); !a.name.empty() && n != actor_names_.end() && n->second == a.id) {
    actor_names_.erase(n);
    unnamed = true;
  }
  try {
    tables_->actors.save(a);
    tables_->actors.drop_spec(a.id);
    if (unnamed) tables_->actors.unname(name_field(a));
  } catch (...) {
  }
  if (!a.replied) {
    a.replied = true;
    reply_.error(a.creator_routing, a.creator_req, code, cause);
  }
  lookups_.answer(a);
  bury_owned(a, "is dead");
}

// The head keeps the most recent dead actors (for status and late lookups) and forgets older
// ones, in memory and in Redis, so a long-running cluster does not grow without bound.
void ActorManager::prune_dead_actors() {
  static const size_t kKeepDead = [] {
    const char* v = getenv("YARD_KEEP_DEAD_ACTORS");
    return v && atoi(v) > 0 ? static_cast<size_t>(atoi(v)) : size_t{10000};
  }();
  std::vector<std::pair<double, std::string>> dead;
  for (auto& [id, a] : actors_)
    if (a.state == store::ActorState::kDead && !lookups_.waiting(id)) dead.emplace_back(a.dead_at, id);
  if (dead.size() <= kKeepDead) return;
  std::sort(dead.begin(), dead.end());
  std::vector<std::pair<std::string, std::string>> forget;  // (id, its name when it still holds it)
  for (size_t i = 0; i + kKeepDead < dead.size(); ++i) {
    auto& id = dead[i].second;
    auto& a = actors_.at(id);
    std::string name;
    if (!a.name.empty()) {
      auto n = actor_names_.find({a.ns, a.name});
      if (n != actor_names_.end() && n->second == id) {
        actor_names_.erase(n);
        name = name_field(a);
      }
    }
    forget.emplace_back(id, name);
    actors_.erase(id);
  }
  try {
    tables_->actors.forget(forget);
  } catch (const std::exception& e) {
    spdlog::error("forgetting old dead actors: {}", e.what());
  }
}

void ActorManager::free_actor_bundle(Actor& a) {
  if (a.pg.empty() || a.bundle < 0) return;
  groups_->give_back(a.pg, a.bundle, a.resources);
  a.bundle = -1;
}

void ActorManager::group_removed(const std::string& group, const std::string& why) {
  for (auto& [id, a] : actors_)
    if (a.pg == group && a.state != store::ActorState::kDead) {
      a.killed = true;
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its placement group " + group + " was removed (" + why + ")");
    }
}

// Stops the actor's process wherever it runs (its node gives the resources back).
void ActorManager::kill_actor_process(Actor& a) {
  if (a.node.empty() || (a.state != store::ActorState::kAlive && !a.placing)) return;
  std::string address = nodes_->address(a.node);
  if (address.empty()) return;
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setKillHosted(a.id);
  notify(io_, address, m.finish(), rid);
}

void ActorManager::on_get(Incoming& in) {
  auto ga = in.msg->env().getBody().getGetActor();
  if (ga.getActorId().size()) {
    auto it = actors_.find(ga.getActorId());
    if (it == actors_.end()) {
      // A handle can travel faster than its actor's creation: an actor that made another and
      // returned its handle at once may not have sent the creation yet. The lookup waits for it.
      lookups_.wait(ga.getActorId(), in, kUnknownWait);
      return;
    }
    auto& a = it->second;
    // Still starting, restarting, or (as far as the head knows) alive where the caller just lost
    // it: the answer waits for the actor to come up, move, or die (a node's death takes up to the
    // heartbeat timeout to be noticed).
    if ((a.state != store::ActorState::kAlive && a.state != store::ActorState::kDead) || (a.state == store::ActorState::kAlive && a.address == std::string(ga.getLostAddress()))) {
      auto wait = std::chrono::seconds(a.state == store::ActorState::kAlive ? 30 : 300);
      lookups_.wait(a.id, in, wait);
      return;
    }
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    fill_actor_info(m.env().getBody().initActorInfo(), it->second);
    io_.reply(in.routing_id, m.finish());
    return;
  }
  std::string name = ga.getName(), ns = ga.getNamespace();
  auto n = actor_names_.find({ns, name});
  if (n == actor_names_.end() || !actors_.count(n->second)) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no actor named '" + name + "' in namespace '" + ns + "'");
    return;
  }
  // A named actor still starting is found too: its handle learns the address on first use (a
  // lookup by id, which waits for the actor to come up).
  auto& a = actors_.at(n->second);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  fill_actor_info(m.env().getBody().initActorInfo(), a);
  io_.reply(in.routing_id, m.finish());
}

void ActorManager::on_kill(Incoming& in) {
  std::string id = in.msg->env().getBody().getKillActor().getActorId();
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "no actor " + id);
    return;
  }
  auto& a = it->second;
  if (in.msg->env().getBody().getKillActor().getRestart() && a.state != store::ActorState::kDead) {
    // As after a crash: restarted within its budget, dead when none is left.
    kill_actor_process(a);
    actor_lost(a, "killed by request, to restart", true);
    reply_.ok(in);
    return process();
  }
  a.killed = true;
  kill_actor_process(a);
  std::string cause = in.msg->env().getBody().getKillActor().getCause();
  if (a.state != store::ActorState::kDead)
    actor_failed(a, wire::ErrorCode::ACTOR_DIED, cause.empty() ? "killed by request" : cause);
  reply_.ok(in);
}

void ActorManager::on_lost(Incoming& in) {
  auto al = in.msg->env().getBody().getActorLost();
  auto it = actors_.find(al.getActorId());
  if (it != actors_.end() && it->second.state == store::ActorState::kAlive && it->second.node == std::string(al.getNodeId()))
    actor_lost(it->second, al.getCause(), true);
  reply_.ok(in);
  process();
}

void ActorManager::count_actors(policy::ClusterView& view) const {
  std::unordered_map<std::string_view, int> count;
  count.reserve(view.nodes.size());
  for (auto& [id, x] : actors_)
    if (x.state != store::ActorState::kDead && !x.node.empty()) ++count[x.node];
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    auto c = count.find(view.nodes[i].id);
    view.set_actors(i, c == count.end() ? 0 : c->second);
  }
}

void ActorManager::tick() {
  lookups_.expire([this](const std::string& id) -> const store::ActorRecord* {
    auto a = actors_.find(id);
    return a == actors_.end() ? nullptr : &a->second;
  });
  expire_waiting();
  auto now = Clock::now();
  if (now >= next_prune_) {
    next_prune_ = now + std::chrono::seconds(10);
    prune_dead_actors();
  }
}

void ActorManager::node_died(const std::string& node) {
  for (auto& [aid, a] : actors_)
    if (a.node == node && (a.state == store::ActorState::kAlive || a.placing)) actor_lost(a, "its node " + node + " died", true);
}

void ActorManager::move_off(const std::string& node) {
  for (auto& [aid, a] : actors_) {
    if (a.node != node || a.state != store::ActorState::kAlive || a.max_restarts == 0 || !a.create_msg) continue;
    kill_actor_process(a);
    a.killed = false;
    free_actor_bundle(a);
    a.state = store::ActorState::kRestarting;
    a.placing = false;
    a.address.clear();
    a.worker.clear();
    a.node.clear();
    a.cause = "moved off node " + node + ", which is draining";
    // A move is a restart for the actor (it starts from its constructor) but does not use up its
    // budget.
    ++a.num_restarts;
    if (a.max_restarts > 0) ++a.max_restarts;
    ++a.epoch;
    tables_->actors.save(a);
    pending_actors_.push_back(aid);
  }
}

void ActorManager::stop(const std::string& id, const std::string& cause) {
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  it->second.killed = true;
  kill_actor_process(it->second);
  actor_failed(it->second, wire::ErrorCode::ACTOR_DIED, cause);
}

void ActorManager::job_ended(const std::string& job) {
  for (auto& [id, a] : actors_)
    if (a.job == job && a.state != store::ActorState::kDead && !a.detached) {
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its job " + job + " ended");
    }
}

}  // namespace yard::sched
