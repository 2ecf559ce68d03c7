// The head's half of the daemon: the actor manager (placement across nodes, restarts, lookups),
// placement groups, the failure detector, and the cluster status. Every decision reads the nodes'
// resources from the control store and takes them with an atomic script there; the chosen node's
// manager then hosts the actor.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon_impl.h"
#include "process.h"
#include "session.h"
#include "yard/errors.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

void Daemon::publish(const std::string& ev) {
  try {
    tables_->publish(ev);
  } catch (const std::exception& e) {
    spdlog::error("publishing an event: {}", e.what());
  }
}

void Daemon::flush_releases() {
  flush_scheduled_ = false;
  if (pending_release_.empty() && pending_del_.empty()) return;
  try {
    release_all(*redis_, pending_release_, pending_del_);
    pending_release_.clear();
    pending_del_.clear();
  } catch (const std::exception& e) {
    spdlog::error("giving back resources of removed placement groups: {}", e.what());
  }
}

Problem Daemon::reserve_now(const std::vector<std::pair<std::string, Res>>& items,
                                const std::vector<std::string>& then_hset) {
  auto why = reserve(*redis_, items, then_hset, pending_release_, pending_del_);
  pending_release_.clear();
  pending_del_.clear();
  return why;
}

// ---- taking over after a killed head -----------------------------------------------------------

namespace {
// Frames <-> one string, to keep an actor's creation message (arguments included) in Redis.
std::string pack_frames(const Frames& frames) {
  std::string out;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(frames.size());
  for (auto& f : frames) {
    put(f.size());
    out.append(static_cast<const char*>(f.data()), f.size());
  }
  return out;
}
Frames unpack_frames(const std::string& s) {
  Frames out;
  size_t off = 0;
  auto get = [&]() -> uint64_t {
    if (off + 8 > s.size()) throw Error("truncated actor record");
    uint64_t v;
    std::memcpy(&v, s.data() + off, 8);
    off += 8;
    return v;
  };
  uint64_t n = get();
  if (n > 1024) throw Error("corrupt actor record");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = get();
    if (off + len > s.size()) throw Error("truncated actor record");
    out.emplace_back(s.data() + off, len);
    off += len;
  }
  return out;
}
}  // namespace

// The actor's creation message, with its arguments as bytes, for restarts by a later head.
void Daemon::save_actor_spec(const Actor& a) {
  OutMessage m(token_, 0, false);
  a.create_msg->rewind();
  auto src = a.create_msg->env().getBody().getCreateActor();
  m.env().getBody().setCreateActor(src);
  auto dst = m.env().getBody().getCreateActor();
  auto args = dst.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], a.create_msg->value(src.getArgs()[i]));
  tables_->save_actor_spec(a.id, pack_frames(m.finish()));
}

// Reads the cluster back from Redis: jobs, actors (with their creation messages), placement
// groups, names and dead nodes. Nodes and their resources are read by refresh_nodes().
void Daemon::rebuild() {
  for (auto& id : tables_->job_ids()) {
    auto rec = tables_->job(id);
    if (!rec || rec->status != store::JobStatus::kRunning) continue;
    Job j;
    static_cast<store::JobRecord&>(j) = std::move(*rec);
    if (j.start == 0) j.start = unix_time();
    pid_t proc = static_cast<pid_t>(j.proc_pid);
    auto& jj = jobs_.emplace(id, std::move(j)).first->second;
    // A submitted job's process was the old head's child and went with it; a driver started by
    // hand keeps running and is watched again.
    bool alive = jj.submitted ? (proc > 0 && !process_dead(proc)) : (jj.driver_pid > 0 && !process_dead(jj.driver_pid));
    if (!alive) {
      jj.status = store::JobStatus::kFailed;
      jj.ended = true;
      jj.exit_code = -1;
      jj.end = unix_time();
      save_job(jj);
      spdlog::warn("job {} ended with the previous head", id);
    } else {
      spdlog::info("job {} is still running (driver pid {})", id, jj.driver_pid);
    }
  }
  for (auto& id : tables_->actor_ids()) {
    auto rec = tables_->actor(id);
    if (!rec) continue;
    Actor a;
    static_cast<store::ActorRecord&>(a) = std::move(*rec);
    a.replied = true;
    if (auto spec = tables_->actor_spec(id)) {
      try {
        a.create_msg = std::make_shared<InMessage>(unpack_frames(*spec));
      } catch (const std::exception& e) {
        spdlog::error("actor {}: its creation record is unreadable ({}): it cannot be restarted", id, e.what());
      }
    }
    auto job = jobs_.find(a.job);
    bool job_live = job != jobs_.end() && !job->second.ended;
    if (a.state != store::ActorState::kDead && !job_live && !a.detached) {
      a.state = store::ActorState::kDead;
      a.cause = "its job " + a.job + " ended while the head was down";
      kill_actor_process(a);
      save_actor(a);
    } else if (a.state == store::ActorState::kPending || a.state == store::ActorState::kRestarting) {
      if (a.create_msg) {
        a.node.clear();
        pending_actors_.push_back(id);
      } else {
        a.state = store::ActorState::kDead;
        a.cause = "the head was replaced before it was placed";
        save_actor(a);
      }
    }
    if (!a.name.empty() && a.state != store::ActorState::kDead) actor_names_[a.name] = id;
    actors_.emplace(id, std::move(a));
  }
  // Groups are found by their keys (a set of ids would cost every creation and removal a round trip).
  for (auto& id : tables_->group_ids()) {
    auto rec = tables_->group(id);
    if (!rec) continue;
    PGroup g;
    static_cast<store::GroupRecord&>(g) = std::move(*rec);
    g.nodes.resize(g.bundles.size());
    g.bundle_avail = g.bundles;
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      auto used = read_res(*redis_, bundle_key(id, static_cast<int>(i)));
      if (!used.empty()) g.bundle_avail[i] = used;
      if (g.nodes[i].empty()) g.bundle_avail[i].clear();
    }
    pgs_.emplace(id, std::move(g));
  }
  for (auto& id : tables_->node_ids())
    if (tables_->node_state(id) == store::NodeState::kDead) dead_nodes_.insert(id);
  spdlog::warn("rebuilt from Redis: {} running jobs, {} actors, {} placement groups", 
               std::count_if(jobs_.begin(), jobs_.end(), [](auto& kv) { return !kv.second.ended; }), actors_.size(),
               pgs_.size());
}

// ---- nodes ------------------------------------------------------------------------------------

void Daemon::refresh_nodes() {
  flush_releases();
  std::set<std::string> seen;
  for (auto& r : tables_->nodes_with_resources()) {
    seen.insert(r.id);
    auto& n = nodes_[r.id];
    n.id = r.id;
    n.address = r.address;
    n.hostname = r.hostname;
    n.total = std::move(r.total);
    n.avail = std::move(r.avail);
    n.alive = !dead_nodes_.count(r.id) && !draining_.count(r.id) && !n.address.empty() && r.has_avail;
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) it = seen.count(it->first) ? std::next(it) : nodes_.erase(it);
}

// The failure detector: a node whose heartbeat key expired is dead. It is marked in its record,
// announced on "yard:events", its resources are withdrawn, its actors restart elsewhere (as far as
// their max_restarts allow) and its placement-group bundles are placed again.
void Daemon::check_nodes() {
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
      if (id == node_id_) continue;
      bool beating = tables_->heartbeating(id);
      if (beating && dead_nodes_.count(id)) {
        // Back (a healed partition, a paused process): it fences itself and rejoins empty.
        dead_nodes_.erase(id);
        tables_->set_node_state(id, store::NodeState::kAlive);
        publish(json{{"type", "node_alive"}, {"node_id", id}, {"time", unix_time()}}.dump());
        spdlog::warn("node {} is heartbeating again", id);
        continue;
      }
      if (beating || dead_nodes_.count(id) || grace) continue;
      dead_nodes_.insert(id);
      double now = unix_time();
      unregister_resources(*redis_, id);
      tables_->set_node_state(id, store::NodeState::kDead, now);
      publish(json{{"type", "node_dead"}, {"node_id", id}, {"time", now}}.dump());
      spdlog::warn("node {}: its heartbeat expired: marked dead", id);
      if (nodes_.count(id)) nodes_[id].alive = false;
      for (auto& [aid, a] : actors_)
        if (a.node == id && (a.state == store::ActorState::kAlive || a.placing)) actor_lost(a, "its node " + id + " died", true);
      for (auto& [gid, g] : pgs_) {
        bool hit = false;
        for (size_t i = 0; i < g.nodes.size(); ++i)
          if (g.nodes[i] == id) {
            g.nodes[i].clear();
            hit = true;
          }
        if (hit && g.state == store::GroupState::kCreated) {
          g.state = store::GroupState::kRescheduling;
          save_pg(g);
        }
      }
    }
    refresh_nodes();
    check_drains();
  } catch (const std::exception& e) {
    spdlog::error("checking nodes: {}", e.what());
  }
}

// ---- draining ---------------------------------------------------------------------------------

// `yard drain NODE`: nothing new goes there; actors that may restart move elsewhere now (without
// using up their restarts); the rest, and leased task workers, are waited for. Then the node is
// told to stop, and leaves the cluster.
void Daemon::on_drain(Incoming& in) {
  auto d = in.msg->env().getBody().getDrainNode();
  std::string id = d.getNodeId();
  auto n = nodes_.find(id);
  if (id == node_id_) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, "node " + id + " is the head; stop the cluster instead (yard stop)");
    return;
  }
  if (n == nodes_.end() || dead_nodes_.count(id)) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no live node " + id + " (yard status lists the nodes)");
    return;
  }
  draining_.insert(id);
  n->second.alive = false;
  tables_->set_node_state(id, store::NodeState::kDraining);
  publish(json{{"type", "node_draining"}, {"node_id", id}, {"time", unix_time()}}.dump());
  spdlog::info("draining node {}", id);
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
  for (auto& [gid, g] : pgs_) {
    bool hit = false;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i] == id) {
        bool used = false;
        for (auto& [aid, a] : actors_)
          if (a.pg == gid && a.bundle == static_cast<int>(i) && a.state != store::ActorState::kDead) used = true;
        if (used) continue;  // waits for its actors
        pending_release_.emplace_back(id, g.bundles[i]);
        g.nodes[i].clear();
        g.bundle_avail[i].clear();
        hit = true;
      }
    if (hit && g.state == store::GroupState::kCreated) g.state = store::GroupState::kRescheduling;
  }
  drains_.push_back({id, in.routing_id, in.msg->env().getRequestId(),
                     Clock::now() + std::chrono::milliseconds(d.getTimeoutMs()), d.getForce()});
  process_actors();
}

void Daemon::check_drains() {
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
    bool gone = dead_nodes_.count(d.node) || !nodes_.count(d.node);
    bool idle = left.empty() && leased == 0;
    if (!gone && !idle && now < d.deadline) {
      ++it;
      continue;
    }
    if (!gone && !idle && !d.force) {
      std::string ids;
      for (auto& x : left) ids += (ids.empty() ? "" : ", ") + x;
      reply_error(d.routing, d.req, wire::ErrorCode::TIMEOUT,
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
      io_->request(nodes_[d.node].address, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
                   std::chrono::seconds(10));
    }
    draining_.erase(d.node);
    spdlog::info("node {} drained", d.node);
    publish(json{{"type", "node_drained"}, {"node_id", d.node}, {"time", unix_time()}}.dump());
    OutMessage m(token_, d.req, true);
    m.env().getBody().setOk();
    io_->reply(d.routing, m.finish());
    it = drains_.erase(it);
  }
}

policy::ClusterView Daemon::cluster_view() const {
  policy::ClusterView v;
  for (auto& [id, n] : nodes_)
    if (n.alive) v.nodes.push_back({id, n.total, n.avail, 0});
  return v;
}

void Daemon::count_actors(policy::ClusterView& view) const {
  std::map<std::string, int> count;
  for (auto& [id, x] : actors_)
    if (x.state != store::ActorState::kDead && !x.node.empty()) ++count[x.node];
  for (auto& n : view.nodes) n.actors = count[n.id];
}

policy::Decision Daemon::pick_node(const Actor& a, const policy::ClusterView& view) const {
  policy::ActorRequest r;
  r.resources = a.resources;
  r.strategy = a.strategy;
  r.affinity_node = a.affinity_node;
  r.soft = a.soft;
  r.local_node = a.caller_node.empty() ? node_id_ : a.caller_node;
  return policy::place_actor(view, r);
}

// ---- actors -----------------------------------------------------------------------------------

bool Daemon::answer_repeated_creation(Incoming& in) {
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
    io_->reply(in.routing_id, m.finish());
  } else {
    a.lookups.push_back({in.routing_id, in.msg->env().getRequestId(), Clock::now() + std::chrono::seconds(300)});
  }
  return true;
}

std::optional<Daemon::Rejection> Daemon::check_new_actor(const Actor& a) {
  if (a.id.empty() || a.class_name.empty() || actors_.count(a.id))
    return Rejection{wire::ErrorCode::BAD_REQUEST, "actor id missing or already used"};
  if (!a.pg.empty()) {
    auto g = pgs_.find(a.pg);
    if (g == pgs_.end() || g->second.state == store::GroupState::kRemoved)
      return Rejection{wire::ErrorCode::NOT_FOUND, "no placement group " + a.pg};
    auto& b = g->second.bundles;
    if (a.bundle >= static_cast<int>(b.size()) || a.bundle < -1)
      return Rejection{wire::ErrorCode::BAD_REQUEST, "placement group " + a.pg + " has " + std::to_string(b.size()) +
                                                         " bundles; there is no bundle " + std::to_string(a.bundle)};
    bool any = false;
    for (int i = 0; i < static_cast<int>(b.size()); ++i)
      if ((a.bundle < 0 || a.bundle == i) && fits(a.resources, b[i])) any = true;
    if (!any)
      return Rejection{wire::ErrorCode::INFEASIBLE, "actor " + a.class_name + " (" + res_text(a.resources) +
                                                        ") does not fit in placement group " + a.pg +
                                                        (a.bundle >= 0 ? " bundle " + std::to_string(a.bundle) : "")};
  } else {
    refresh_nodes();
    auto d = pick_node(a, cluster_view());
    if (d.outcome == policy::Outcome::kInfeasible)
      return Rejection{wire::ErrorCode::INFEASIBLE,
                       "actor " + a.class_name + " cannot be placed on any node (" + d.why + ")"};
  }
  if (!a.name.empty()) {
    auto n = actor_names_.find(a.name);
    if (n != actor_names_.end() && actors_.count(n->second) && actors_.at(n->second).state != store::ActorState::kDead)
      return Rejection{wire::ErrorCode::BAD_REQUEST, "an actor named '" + a.name + "' already exists"};
  }
  return std::nullopt;
}

void Daemon::on_create_actor(Incoming& in) {
  auto ca = in.msg->env().getBody().getCreateActor();
  std::string job = ca.getJobId();
  if (!jobs_.count(job) || jobs_.at(job).ended) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "job " + job + " is not running");
    return;
  }
  if (answer_repeated_creation(in)) return;
  Actor a;
  a.id = ca.getActorId();
  a.class_name = ca.getClassName();
  a.name = ca.getName();
  a.job = job;
  a.max_restarts = ca.getMaxRestarts();
  a.affinity_node = ca.getNodeId();
  a.soft = ca.getSoft();
  a.caller_node = ca.getCallerNode();
  a.pg = ca.getPlacementGroup();
  a.bundle = ca.getBundleIndex();
  a.detached = ca.getDetached();
  if (auto bad = read_resources(ca.getResources(), a.resources)) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, *bad);
    return;
  }
  auto strategy = policy::parse_actor_strategy(ca.getStrategy().cStr());
  if (!strategy) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST,
                "unknown scheduling strategy '" + std::string(ca.getStrategy().cStr()) + "' (DEFAULT or SPREAD)");
    return;
  }
  a.strategy = *strategy;
  if (auto no = check_new_actor(a)) {
    reply_error(in, no->code, no->why);
    return;
  }
  if (!a.name.empty()) {
    actor_names_[a.name] = a.id;
    tables_->name_actor(a.name, a.id);
  }
  a.creator_routing = in.routing_id;
  a.creator_req = in.msg->env().getRequestId();
  a.create_msg = std::shared_ptr<InMessage>(std::move(in.msg));
  a.place_bundle = a.bundle;
  a.bundle = -1;
  std::string id = a.id;
  actors_.emplace(id, std::move(a));
  tables_->add_actor(id);
  save_actor(actors_.at(id));
  if (actors_.at(id).max_restarts != 0) save_actor_spec(actors_.at(id));
  pending_actors_.push_back(id);
  process_actors();
}

void Daemon::process_actors() {
  std::optional<policy::ClusterView> view;  // built on first need, kept up to date in this pass
  bool counted = false;                     // its actor counts filled (for SPREAD)
  for (auto it = pending_actors_.begin(); it != pending_actors_.end();) {
    auto f = actors_.find(*it);
    if (f == actors_.end() || f->second.state == store::ActorState::kDead || f->second.state == store::ActorState::kAlive || f->second.placing) {
      it = pending_actors_.erase(it);
      continue;
    }
    auto& a = f->second;
    std::string node;
    if (!a.pg.empty()) {
      auto g = pgs_.find(a.pg);
      if (g == pgs_.end() || g->second.state == store::GroupState::kRemoved) {
        actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its placement group " + a.pg + " was removed");
        it = pending_actors_.erase(it);
        continue;
      }
      auto& pg = g->second;
      for (int i = 0; i < static_cast<int>(pg.bundles.size()); ++i) {
        if (a.place_bundle >= 0 && a.place_bundle != i) continue;
        if (pg.nodes[i].empty() || !fits(a.resources, pg.bundles[i])) continue;
        // The bundle's free resources are shared with tasks in it (leased by its node): the
        // count in Redis decides, not this process's view.
        if (!reserve_bundle(*redis_, bundle_key(pg.id, i), pg.bundles[i], a.resources)) {
          pg.bundle_avail[i] = read_res(*redis_, bundle_key(pg.id, i));
          continue;
        }
        a.bundle = i;
        sub(pg.bundle_avail[i], a.resources);
        node = pg.nodes[i];
        break;
      }
      if (node.empty()) {
        ++it;
        continue;
      }
    } else {
      if (!view) {
        view = cluster_view();
        counted = false;
      }
      if (a.strategy == policy::ActorStrategy::kSpread && !counted) {
        count_actors(*view);
        counted = true;
      }
      auto d = pick_node(a, *view);
      if (d.outcome != policy::Outcome::kPlaced) {
        ++it;  // waits for room (or for a feasible node to join); later ones that fit may go first
        continue;
      }
      node = d.node;
      Problem why;
      try {
        why = reserve_now({{node, a.resources}});
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (why) {
        nodes_[node].avail = read_res(*redis_, avail_key(node));
        view.reset();
        ++it;
        continue;
      }
      sub(nodes_[node].avail, a.resources);
      view->place(node, a.resources);
    }
    it = pending_actors_.erase(it);
    place_actor(a, node);
  }
}

// Asks `node`'s manager to host the actor; its resources are already taken there.
void Daemon::place_actor(Actor& a, const std::string& node) {
  a.node = node;
  a.placing = true;
  uint64_t epoch = ++a.epoch;
  uint64_t rid = io_->next_request_id();
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
  ca.setDetached(a.detached);
  auto args = ca.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], a.create_msg->value(src.getArgs()[i]));
  set_resources(ha.initResources(static_cast<unsigned>(a.resources.size())), a.resources);
  // Resources of a placement-group actor belong to its bundle, which the group gives back.
  if (a.pg.empty()) set_resources(ha.initRelease(static_cast<unsigned>(a.resources.size())), a.resources);
  std::string address = node == node_id_ ? io_->address() : nodes_[node].address;
  std::string aid = a.id;
  spdlog::info("actor {} ({}) placed on node {}{}", a.id, a.class_name, node,
               a.num_restarts ? " (restart " + std::to_string(a.num_restarts) + ")" : "");
  io_->request(address, rid, m.finish(),
               [this, aid, node, epoch](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 auto it = actors_.find(aid);
                 if (it == actors_.end()) return;
                 auto& a = it->second;
                 if (a.epoch != epoch || !a.placing) {
                   // Killed or moved meanwhile: a process that did come up there is not wanted.
                   if (!err && !r->env().getBody().isError()) {
                     uint64_t k = io_->next_request_id();
                     OutMessage km(token_, k, false);
                     km.env().getBody().setKillHosted(aid);
                     io_->request(node == node_id_ ? io_->address() : nodes_[node].address, k, km.finish(),
                                  [](std::unique_ptr<InMessage>, std::optional<LocalError>) {}, std::chrono::seconds(10));
                   }
                   return;
                 }
                 a.placing = false;
                 if (err) {
                   // Probably a node that died and is not declared dead yet: placing it again
                   // (there, until the detector has spoken, then elsewhere) is worth a while.
                   if (++a.unreachable < 400 && a.place_failures > 0) --a.place_failures;
                   actor_lost(a, "node " + node + " could not host it: " + err->message, false);
                   return;
                 }
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   auto e = body.getError();
                   if (e.getCode() == wire::ErrorCode::UNAVAILABLE) {
                     actor_lost(a, "node " + node + ": " + std::string(e.getMessage()), false);
                     return;
                   }
                   actor_failed(a, e.getCode() == wire::ErrorCode::TASK_ERROR ? wire::ErrorCode::ACTOR_DIED : e.getCode(),
                                e.getMessage());
                   return;
                 }
                 actor_up(a, *r);
               },
               std::chrono::seconds(150));
}

void Daemon::actor_up(Actor& a, const InMessage& r) {
  auto info = r.env().getBody().getActorInfo();
  a.state = store::ActorState::kAlive;
  a.address = info.getAddress();
  a.worker = info.getWorkerId();
  a.node = info.getNodeId();
  a.place_failures = 0;
  if (a.max_restarts == 0) a.create_msg.reset();
  save_actor(a);
  spdlog::info("actor {} ({}) alive on node {} at {}", a.id, a.class_name, a.node, a.address);
  if (a.num_restarts)
    publish(json{{"type", "actor_restarted"}, {"actor_id", a.id}, {"node_id", a.node}, {"restarts", a.num_restarts},
                 {"time", unix_time()}}.dump());
  if (!a.replied) {
    a.replied = true;
    OutMessage m(token_, a.creator_req, true);
    fill_actor_info(m.env().getBody().initActorInfo(), a);
    io_->reply(a.creator_routing, m.finish());
  }
  answer_lookups(a);
}

// The actor's process (or node) is gone without anyone asking: restart it if it may.
void Daemon::actor_lost(Actor& a, const std::string& cause, bool count_restart) {
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
  try { save_actor(a); } catch (...) {}
  publish(json{{"type", "actor_restarting"}, {"actor_id", a.id}, {"cause", cause}, {"restarts", a.num_restarts},
               {"time", unix_time()}}.dump());
  pending_actors_.push_back(a.id);
}

void Daemon::actor_failed(Actor& a, wire::ErrorCode code, const std::string& cause) {
  free_actor_bundle(a);
  a.state = store::ActorState::kDead;
  a.dead_at = unix_time();
  a.cause = cause;
  a.placing = false;
  a.create_msg.reset();
  spdlog::warn("actor {} ({}) is dead: {}", a.id, a.class_name, cause);
  try {
    save_actor(a);
    tables_->drop_actor_spec(a.id);
  } catch (...) {
  }
  if (!a.replied) {
    a.replied = true;
    reply_error(a.creator_routing, a.creator_req, code, cause);
  }
  answer_lookups(a);
}

// The head keeps the most recent dead actors (for status and late lookups) and forgets older
// ones, in memory and in Redis, so a long-running cluster does not grow without bound.
void Daemon::prune_dead_actors() {
  static const size_t kKeepDead = [] {
    const char* v = getenv("YARD_KEEP_DEAD_ACTORS");
    return v && atoi(v) > 0 ? static_cast<size_t>(atoi(v)) : size_t{10000};
  }();
  std::vector<std::pair<double, std::string>> dead;
  for (auto& [id, a] : actors_)
    if (a.state == store::ActorState::kDead && a.lookups.empty()) dead.emplace_back(a.dead_at, id);
  if (dead.size() <= kKeepDead) return;
  std::sort(dead.begin(), dead.end());
  std::vector<std::pair<std::string, std::string>> forget;  // (id, its name when it still holds it)
  for (size_t i = 0; i + kKeepDead < dead.size(); ++i) {
    auto& id = dead[i].second;
    auto& a = actors_.at(id);
    std::string name;
    if (!a.name.empty()) {
      auto n = actor_names_.find(a.name);
      if (n != actor_names_.end() && n->second == id) {
        actor_names_.erase(n);
        name = a.name;
      }
    }
    forget.emplace_back(id, name);
    actors_.erase(id);
  }
  try {
    tables_->forget_actors(forget);
  } catch (const std::exception& e) {
    spdlog::error("forgetting old dead actors: {}", e.what());
  }
}

void Daemon::free_actor_bundle(Actor& a) {
  if (a.pg.empty() || a.bundle < 0) return;
  auto g = pgs_.find(a.pg);
  if (g != pgs_.end() && a.bundle < static_cast<int>(g->second.bundle_avail.size())) {
    add(g->second.bundle_avail[a.bundle], a.resources);
    try {
      release_bundle(*redis_, bundle_key(a.pg, a.bundle), a.resources);
    } catch (const std::exception& e) {
      spdlog::error("giving back bundle {} of {}: {}", a.bundle, a.pg, e.what());
    }
  }
  a.bundle = -1;
}

// Stops the actor's process wherever it runs (its node gives the resources back).
void Daemon::kill_actor_process(Actor& a) {
  if (a.node.empty() || (a.state != store::ActorState::kAlive && !a.placing)) return;
  auto n = nodes_.find(a.node);
  std::string address = a.node == node_id_ ? io_->address() : (n != nodes_.end() ? n->second.address : "");
  if (address.empty()) return;
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setKillHosted(a.id);
  io_->request(address, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
               std::chrono::seconds(10));
}

void Daemon::answer_lookups(Actor& a, bool expired_only) {
  auto now = Clock::now();
  for (auto it = a.lookups.begin(); it != a.lookups.end();) {
    if (expired_only && it->deadline > now) {
      ++it;
      continue;
    }
    OutMessage m(token_, it->req, true);
    fill_actor_info(m.env().getBody().initActorInfo(), a);
    io_->reply(it->routing, m.finish());
    it = a.lookups.erase(it);
  }
}

void Daemon::fill_actor_info(wire::ActorInfo::Builder b, const Actor& a) {
  b.setActorId(a.id);
  b.setClassName(a.class_name);
  b.setAddress(a.address);
  b.setState(store::name(a.state));
  b.setName(a.name);
  b.setWorkerId(a.worker);
  b.setDeathCause(a.cause);
  b.setNodeId(a.node);
  b.setNumRestarts(a.num_restarts);
}

void Daemon::save_actor(const Actor& a) { tables_->save_actor(a); }

void Daemon::on_get_actor(Incoming& in) {
  auto ga = in.msg->env().getBody().getGetActor();
  if (ga.getActorId().size()) {
    auto it = actors_.find(ga.getActorId());
    if (it == actors_.end()) {
      reply_error(in, wire::ErrorCode::NOT_FOUND, "no actor " + std::string(ga.getActorId()));
      return;
    }
    auto& a = it->second;
    // Still starting, restarting, or (as far as the head knows) alive where the caller just lost
    // it: the answer waits for the actor to come up, move, or die (a node's death takes up to the
    // heartbeat timeout to be noticed).
    if ((a.state != store::ActorState::kAlive && a.state != store::ActorState::kDead) || (a.state == store::ActorState::kAlive && a.address == std::string(ga.getLostAddress()))) {
      auto wait = std::chrono::seconds(a.state == store::ActorState::kAlive ? 30 : 300);
      a.lookups.push_back({in.routing_id, in.msg->env().getRequestId(), Clock::now() + wait});
      return;
    }
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    fill_actor_info(m.env().getBody().initActorInfo(), it->second);
    io_->reply(in.routing_id, m.finish());
    return;
  }
  std::string name = ga.getName();
  auto n = actor_names_.find(name);
  if (n == actor_names_.end() || !actors_.count(n->second)) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no actor named '" + name + "'");
    return;
  }
  auto& a = actors_.at(n->second);
  if (a.state == store::ActorState::kPending) {
    reply_error(in, wire::ErrorCode::UNAVAILABLE, "actor '" + name + "' is still starting");
    return;
  }
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  fill_actor_info(m.env().getBody().initActorInfo(), a);
  io_->reply(in.routing_id, m.finish());
}

void Daemon::on_kill_actor(Incoming& in) {
  std::string id = in.msg->env().getBody().getKillActor().getActorId();
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no actor " + id);
    return;
  }
  auto& a = it->second;
  a.killed = true;
  kill_actor_process(a);
  if (a.state != store::ActorState::kDead) actor_failed(a, wire::ErrorCode::ACTOR_DIED, "killed by request");
  reply_ok(in);
}

void Daemon::on_actor_lost(Incoming& in) {
  auto al = in.msg->env().getBody().getActorLost();
  auto it = actors_.find(al.getActorId());
  if (it != actors_.end() && it->second.state == store::ActorState::kAlive && it->second.node == std::string(al.getNodeId()))
    actor_lost(it->second, al.getCause(), true);
  reply_ok(in);
  process_actors();
}

// ---- placement groups -------------------------------------------------------------------------

void Daemon::save_pg(const PGroup& g) { tables_->save_group(g); }

// Places the group's unplaced bundles: plans on the cached view, then takes everything in one
// atomic script. False when it does not fit now (it is tried again as resources free up).
policy::Decision Daemon::try_place_pg(PGroup& g, bool check_feasible) {
  policy::GroupRequest req;
  req.bundles = g.bundles;
  req.strategy = g.strategy;
  req.placed = g.nodes;
  req.check_feasible = check_feasible;
  auto plan = policy::place_bundles(cluster_view(), req);
  if (plan.outcome == policy::Outcome::kInfeasible) return policy::Decision::infeasible(plan.why);
  if (plan.outcome == policy::Outcome::kWait) return policy::Decision::wait();
  std::vector<std::pair<std::string, Res>> items;
  for (size_t i = 0; i < g.bundles.size(); ++i)
    if (g.nodes[i].empty()) items.emplace_back(plan.nodes[i], g.bundles[i]);
  if (items.empty()) {
    g.state = store::GroupState::kCreated;
    save_pg(g);
    return policy::Decision::placed({});
  }
  Problem why;
  try {
    // The group's record says CREATED in the same atomic step that takes the resources.
    store::GroupRecord created = g;
    created.state = store::GroupState::kCreated;
    created.nodes = plan.nodes;
    why = reserve_now(items, store::Tables::group_fields(created));
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (why) {
    for (auto& [n, r] : items) nodes_[n].avail = read_res(*redis_, avail_key(n));
    return policy::Decision::wait();
  }
  for (auto& [n, r] : items) sub(nodes_[n].avail, r);
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

void Daemon::answer_pg_waiters(PGroup& g) {
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

void Daemon::on_create_pg(Incoming& in) {
  auto c = in.msg->env().getBody().getCreatePlacementGroup();
  PGroup g;
  g.id = c.getGroupId();
  g.job = c.getJobId();
  g.name = c.getName();
  std::string strategy = c.getStrategy();
  auto parsed = policy::parse_bundle_strategy(strategy.empty() ? "PACK" : strategy);
  if (!parsed) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, "unknown placement strategy '" + strategy +
                                                      "' (PACK, SPREAD, STRICT_PACK or STRICT_SPREAD)");
    return;
  }
  g.strategy = *parsed;
  if (g.id.empty() || pgs_.count(g.id)) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, "placement group id missing or already used");
    return;
  }
  if (!jobs_.count(g.job) || jobs_.at(g.job).ended) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "job " + g.job + " is not running");
    return;
  }
  if (c.getBundles().size() == 0) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, "a placement group needs at least one bundle");
    return;
  }
  for (auto b : c.getBundles()) {
    Res r;
    if (auto bad = read_resources(b.getResources(), r)) {
      reply_error(in, wire::ErrorCode::BAD_REQUEST, *bad);
      return;
    }
    g.bundles.push_back(r);
  }
  g.bundle_avail.assign(g.bundles.size(), Res{});
  g.nodes.assign(g.bundles.size(), "");
  g.created_at = unix_time();
  auto placed = try_place_pg(g, true);
  if (placed.outcome == policy::Outcome::kInfeasible) {
    reply_error(in, wire::ErrorCode::INFEASIBLE, "placement group " + g.id + " (" + policy::name(g.strategy) + ", " +
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

void Daemon::on_wait_pg(Incoming& in) {
  auto w = in.msg->env().getBody().getWaitPlacementGroup();
  auto it = pgs_.find(w.getGroupId());
  if (it == pgs_.end()) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + std::string(w.getGroupId()));
    return;
  }
  it->second.waiters.push_back({in.routing_id, in.msg->env().getRequestId(),
                                Clock::now() + std::chrono::milliseconds(w.getTimeoutMs())});
  answer_pg_waiters(it->second);
}

void Daemon::remove_pg(PGroup& g, const std::string& why) {
  if (g.state == store::GroupState::kRemoved) return;
  for (auto& [id, a] : actors_)
    if (a.pg == g.id && a.state != store::ActorState::kDead) {
      a.killed = true;
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its placement group " + g.id + " was removed (" + why + ")");
    }
  std::vector<std::pair<std::string, Res>> items;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].empty()) items.emplace_back(g.nodes[i], g.bundles[i]);
  pending_release_.insert(pending_release_.end(), items.begin(), items.end());
  pending_del_.push_back(store::Tables::group_key(g.id));
  for (size_t i = 0; i < g.bundles.size(); ++i) pending_del_.push_back(bundle_key(g.id, static_cast<int>(i)));
  if (!flush_scheduled_) {
    flush_scheduled_ = true;
    io_->after(std::chrono::milliseconds(2), [this] { flush_releases(); });
  }
  for (auto& [n, r] : items)
    if (nodes_.count(n)) add(nodes_[n].avail, r);
  g.state = store::GroupState::kRemoved;
  answer_pg_waiters(g);
}

void Daemon::on_remove_pg(Incoming& in) {
  std::string id = in.msg->env().getBody().getRemovePlacementGroup();
  auto it = pgs_.find(id);
  if (it == pgs_.end()) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no placement group " + id);
    return;
  }
  remove_pg(it->second, "removed by request");
  pgs_.erase(it);
  reply_ok(in);
  process_actors();
}

// ---- status -----------------------------------------------------------------------------------

void Daemon::on_status(Incoming& in) {
  json j;
  json c;
  for (auto& [k, v] : tables_->cluster()) c[k] = v;
  c["redis"] = o_.redis_address;
  j["cluster"] = c;
  std::map<std::string, json> per_node;
  json actors = json::array();
  for (auto& [id, a] : actors_) {
    json x = {{"actor_id", id}, {"class", a.class_name}, {"name", a.name}, {"state", store::name(a.state)}, {"job", a.job},
              {"node", a.node}, {"address", a.address}, {"death_cause", a.cause}, {"restarts", a.num_restarts},
              {"max_restarts", a.max_restarts}, {"resources", a.resources}, {"placement_group", a.pg},
              {"detached", a.detached}};
    actors.push_back(x);
    if (a.state == store::ActorState::kAlive) per_node[a.node].push_back(id);
  }
  json nodes = json::array();
  for (auto& id : tables_->node_ids()) {
    json n;
    n["node_id"] = id;
    for (auto& [k, v] : tables_->node_fields(id))
      if (k.rfind("resources_", 0) != 0) n[k] = v;
    n["resources_total"] = read_res(*redis_, total_key(id));
    n["resources_available"] = read_res(*redis_, avail_key(id));
    n["alive"] = tables_->heartbeating(id) && !dead_nodes_.count(id);
    n["actors"] = per_node.count(id) ? per_node[id] : json::array();
    if (id == node_id_) n["workers"] = workers_.size();
    nodes.push_back(n);
  }
  j["nodes"] = nodes;
  j["actors"] = actors;
  json groups = json::array();
  for (auto& [id, g] : pgs_)
    groups.push_back({{"placement_group_id", id}, {"name", g.name}, {"job", g.job}, {"strategy", policy::name(g.strategy)},
                      {"state", store::name(g.state)}, {"bundles", g.bundles}, {"bundle_nodes", g.nodes}});
  j["placement_groups"] = groups;
  json jobs = json::array();
  for (auto& id : tables_->job_ids()) {
    json jj;
    jj["job_id"] = id;
    for (auto& [k, v] : tables_->job_fields(id)) jj[k] = v;
    jobs.push_back(jj);
  }
  j["jobs"] = jobs;
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(j.dump());
  io_->reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
