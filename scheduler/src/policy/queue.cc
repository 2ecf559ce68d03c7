// The job queue's cycle (queue.h): order, admit at MIN, keep room being freed for the jobs it is
// freed for, preempt for the rest, then grow running jobs with what is left.
#include "policy/queue.h"

#include <algorithm>
#include <tuple>

#include "policy/fair_share.h"
#include "policy/view_edit.h"

namespace yard::sched::policy {

Res JobShape::total(int replicas) const {
  Res r;
  for (auto& f : fixed) add(r, f);
  for (int i = 0; i < replicas; ++i) add(r, replica);
  return r;
}

// A job counts against its team with what it was allotted, or what its actors, placement groups
// and task leases hold where that is more (what it runs beyond its shape).
std::map<std::string, Res> team_usage(const std::vector<RunningJob>& running) {
  std::map<std::string, Res> u;
  for (auto& j : running) {
    Res counted = j.shape.total(j.replicas());
    for (auto& [k, v] : j.held) counted[k] = std::max(counted[k], v);
    add(u[j.team], counted);
  }
  return u;
}

// Where the room being freed now lies: the pool plus the replicas asked to leave and the jobs
// stopping.
ClusterView soon_view(const QueueInput& in) {
  ClusterView v = in.pool;
  for (auto& j : in.running) {
    if (j.stopping) {
      for (size_t i = 0; i < j.fixed_nodes.size() && i < j.shape.fixed.size(); ++i) give(v, j.fixed_nodes[i], j.shape.fixed[i]);
      for (auto& n : j.replica_nodes) give(v, n, j.shape.replica);
    } else {
      for (auto& n : j.releasing) give(v, n, j.shape.replica);
    }
  }
  return v;
}

namespace {

const TeamQuota* team_of(const QueueInput& in, const std::string& name) {
  for (auto& t : in.teams)
    if (t.name == name) return &t;
  return nullptr;
}

double rank_of(const QueueInput& in, const std::string& team) {
  auto u = in.fair_usage.find(team);
  const TeamQuota* t = team_of(in, team);
  return fair_rank(u == in.fair_usage.end() ? 0 : u->second, t ? t->weight : 1);
}

// Why the team's ceiling stops `need`, or "" when it does not.
std::string over_ceiling(const TeamQuota* t, const Res& usage, const Res& need) {
  if (!t || t->ceiling.empty()) return "";
  Res after = usage;
  add(after, need);
  if (fits(after, t->ceiling)) return "";
  return "team " + t->name + " holds " + res_text(usage) + "; with this job's " + res_text(need) +
         " it would pass its ceiling of " + res_text(t->ceiling);
}

// Whether nodes of these types could hold every part of the job (each on a node of its own type).
bool nodes_could_hold(const std::vector<NodeType>& types, const JobShape& shape) {
  if (types.empty()) return false;
  for (auto& part : shape.fixed)
    if (!some_type_holds(types, part)) return false;
  return shape.min == 0 || some_type_holds(types, shape.replica);
}

struct Cycle {
  const QueueInput& in;
  QueueDecision out;
  std::map<std::string, Res> usage;
  ClusterView now, soon;  // free room now; free room once what is being freed has left
  std::vector<std::string> admitted_ids;
  bool victims_pending = false;  // a job waits for victims chosen earlier: nobody grows meanwhile

  explicit Cycle(const QueueInput& i) : in(i), usage(team_usage(i.running)), now(i.pool), soon(soon_view(i)) {}

  void wait(const QueuedJob& j, int prio, WaitReason r, std::string detail = {}) {
    out.waiting.push_back({j.id, {r, std::move(detail)}, prio});
  }
  // Keeps the room at `nodes` for the job on both views.
  void reserve(const JobShape& s, const std::vector<std::string>& nodes) {
    take_placed(now, s.fixed, s.replica, nodes);
    take_placed(soon, s.fixed, s.replica, nodes);
  }
  void consider(const QueuedJob& j);
  bool preempt_for(const QueuedJob& j, int prio);
  void grow();
};

void Cycle::consider(const QueuedJob& j) {
  int prio = effective_priority(in, j);
  const TeamQuota* team = team_of(in, j.team);
  if (!in.teams.empty() && !team) return wait(j, prio, WaitReason::kUnknownTeam, "team " + j.team);
  if (j.held) return wait(j, prio, WaitReason::kHeld);
  Res need = j.shape.total(j.shape.min);
  if (auto why = over_ceiling(team, usage[j.team], need); !why.empty()) return wait(j, prio, WaitReason::kTeamCeiling, why);
  GroupDecision d = place_job(now, j.shape, j.shape.min);
  if (d.outcome == Outcome::kInfeasible) {
    if (nodes_could_hold(in.node_types, j.shape))
      return wait(j, prio, WaitReason::kNodeStarting, "no running node could hold it; waiting for the autoscaler to add one (" + d.why + ")");
    return wait(j, prio, WaitReason::kInfeasible, d.why);
  }
  if (d.outcome == Outcome::kPlaced) {
    reserve(j.shape, d.nodes);
    add(usage[j.team], need);
    Admit a{j.id, {}, {}};
    for (size_t i = 0; i < d.nodes.size(); ++i) (i < j.shape.fixed.size() ? a.fixed_nodes : a.replica_nodes).push_back(d.nodes[i]);
    out.admit.push_back(std::move(a));
    admitted_ids.push_back(j.id);
    return;
  }
  if (GroupDecision s = place_job(soon, j.shape, j.shape.min); s.outcome == Outcome::kPlaced) {
    reserve(j.shape, s.nodes);
    return wait(j, prio, WaitReason::kFreeingRoom, "waiting for room being freed");
  }
  if (j.freeing_since > 0 && in.now - j.freeing_since < kVictimSettleS) {
    victims_pending = true;
    return wait(j, prio, WaitReason::kFreeingRoom, "waiting for the room its victims free");
  }
  if (preempt_for(j, prio)) return;
  bool alone = place_job(in.pool, j.shape, j.shape.min).outcome == Outcome::kPlaced;
  auto count = [](size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
  std::string parts = j.shape.fixed.empty() ? "" : count(j.shape.fixed.size(), "fixed part") + " and ";
  wait(j, prio, alone ? WaitReason::kBehindInQueue : WaitReason::kNoRoom,
       "needs " + res_text(need) + " (" + parts + count(static_cast<size_t>(j.shape.min), "replica") + " of " +
           res_text(j.shape.replica) + ")");
}

bool Cycle::preempt_for(const QueuedJob& j, int prio) {
  Preemption p = choose_victims(in, soon, j, prio, usage);
  if (p.victims.empty()) return false;
  std::string who;
  for (auto& v : p.victims) {
    const RunningJob* r = nullptr;
    for (auto& x : in.running)
      if (x.id == v.job) r = &x;
    if (!r) continue;
    if (v.kind == VictimKind::kStop) {
      for (size_t i = 0; i < r->fixed_nodes.size() && i < r->shape.fixed.size(); ++i) give(soon, r->fixed_nodes[i], r->shape.fixed[i]);
      for (auto& n : r->replica_nodes) give(soon, n, r->shape.replica);
    } else {
      for (auto& n : v.nodes) give(soon, n, r->shape.replica);
    }
    who += (who.empty() ? "" : ", ") + std::string(v.kind == VictimKind::kStop ? "stopping " : "shrinking ") + v.job;
    out.preempt.push_back(v);
  }
  if (GroupDecision s = place_job(soon, j.shape, j.shape.min); s.outcome == Outcome::kPlaced) reserve(j.shape, s.nodes);
  wait(j, prio, WaitReason::kFreeingRoom, who);
  return true;
}

// Room nobody queued could use goes to running and just admitted jobs below MAX, one replica per
// job per round in priority order (then fair share, then age), within their teams' ceilings.
// Jobs shrinking or stopping do not grow.
void Cycle::grow() {
  if (victims_pending) return;
  struct Candidate {
    std::string id, team;
    int priority;
    double since;
    const JobShape* shape;
    std::vector<std::string> replicas;
    size_t grown = 0;
  };
  std::vector<Candidate> c;
  for (auto& r : in.running)
    if (!r.stopping && r.releasing.empty() && r.replicas() < r.shape.max)
      c.push_back({r.id, r.team, r.priority, r.admitted_at, &r.shape, r.replica_nodes});
  for (auto& a : out.admit)
    for (auto& q : in.queued)
      if (q.id == a.job && q.shape.max > q.shape.min)
        c.push_back({q.id, q.team, q.priority, in.now, &q.shape, a.replica_nodes});
  std::sort(c.begin(), c.end(), [&](const Candidate& x, const Candidate& y) {
    return std::make_tuple(-x.priority, rank_of(in, x.team), x.since, x.id) <
           std::make_tuple(-y.priority, rank_of(in, y.team), y.since, y.id);
  });
  for (bool more = true; more;) {
    more = false;
    for (auto& k : c) {
      if (static_cast<int>(k.replicas.size()) >= k.shape->max) continue;
      if (!over_ceiling(team_of(in, k.team), usage[k.team], k.shape->replica).empty()) continue;
      GroupRequest g{std::vector<Res>(k.replicas.size() + 1, k.shape->replica), k.shape->strategy, k.replicas, false};
      GroupDecision d = place_bundles(now, g);
      if (d.outcome != Outcome::kPlaced) continue;
      give(now, d.nodes.back(), k.shape->replica, -1);
      add(usage[k.team], k.shape->replica);
      k.replicas.push_back(d.nodes.back());
      ++k.grown;
      more = true;
    }
  }
  for (auto& k : c)
    if (k.grown > 0) out.grow.push_back({k.id, {k.replicas.end() - static_cast<long>(k.grown), k.replicas.end()}});
}

}  // namespace

int effective_priority(const QueueInput& in, const QueuedJob& j) {
  if (in.starvation_s <= 0 || in.now - j.queued_at < in.starvation_s) return j.priority;
  const TeamQuota* t = team_of(in, j.team);
  return t ? std::max(j.priority, t->max_priority) : j.priority;
}

std::vector<size_t> queue_order(const QueueInput& in) {
  std::vector<size_t> order(in.queued.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::tuple<int, double, double, std::string>> key;
  for (auto& j : in.queued) key.emplace_back(-effective_priority(in, j), rank_of(in, j.team), j.queued_at, j.id);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  return order;
}

GroupDecision place_job(const ClusterView& view, const JobShape& shape, int replicas) {
  GroupDecision out;
  ClusterView v = view;
  if (!shape.fixed.empty()) {
    GroupDecision f = place_bundles(v, {shape.fixed, BundleStrategy::kPack, {}, true});
    if (f.outcome != Outcome::kPlaced) return f;
    take_placed(v, shape.fixed, shape.replica, f.nodes);
    out.nodes = f.nodes;
  }
  if (replicas > 0) {
    GroupDecision r = place_bundles(v, {std::vector<Res>(static_cast<size_t>(replicas), shape.replica), shape.strategy, {}, true});
    if (r.outcome != Outcome::kPlaced) return r;
    out.nodes.insert(out.nodes.end(), r.nodes.begin(), r.nodes.end());
  }
  out.outcome = Outcome::kPlaced;
  return out;
}

QueueDecision schedule_queue(const QueueInput& in) {
  Cycle c(in);
  for (size_t i : queue_order(in)) c.consider(in.queued[i]);
  c.grow();
  return std::move(c.out);
}

}  // namespace yard::sched::policy
