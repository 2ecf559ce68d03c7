// Choosing whom to disturb for a job that does not fit (the rules are in queue.h): replicas above
// MIN first, then whole jobs at MIN; greedily until the job fits, then the victims it turns out
// not to need are given back.
#include <algorithm>
#include <set>
#include <tuple>

#include "policy/queue.h"
#include "policy/view_edit.h"

namespace yard::sched::policy {

namespace {

// One thing that can be taken: a replica above MIN of a job (on its node), or a whole job.
struct Unit {
  size_t job;        // index into QueueInput::running
  VictimKind kind;
  std::string node;  // kShrink: the replica's node
};

const TeamQuota* team_of(const QueueInput& in, const std::string& name) {
  for (auto& t : in.teams)
    if (t.name == name) return &t;
  return nullptr;
}

// A rough size for ordering: the sum of the amounts, memory aside.
double amount(const Res& r) {
  double a = 0;
  for (auto& [k, v] : r)
    if (k != "memory") a += v;
  return a;
}

// Whether `usage` is above the team's guarantee in some resource (the team borrows).
bool borrowing(const TeamQuota* t, const Res& usage) {
  for (auto& [k, v] : usage) {
    double g = 0;
    if (t)
      if (auto it = t->guarantee.find(k); it != t->guarantee.end()) g = it->second;
    if (v > g + 1e-9) return true;
  }
  return false;
}

// Whether taking `r` from a team with `usage` leaves it at or above its guarantee.
bool keeps_guarantee(const TeamQuota* t, const Res& usage, const Res& r) {
  if (!t) return true;
  for (auto& [k, v] : r) {
    if (v <= 0) continue;
    auto g = t->guarantee.find(k);
    if (g == t->guarantee.end()) continue;
    auto u = usage.find(k);
    if ((u == usage.end() ? 0 : u->second) - v < g->second - 1e-9) return false;
  }
  return true;
}

struct Chooser {
  const QueueInput& in;
  const ClusterView& soon;
  const QueuedJob& job;
  int priority;
  std::map<std::string, Res> usage;
  bool reclaiming = false;  // the job's team stays within its guarantee with it

  Res freed(const Unit& u) const {
    auto& r = in.running[u.job];
    if (u.kind == VictimKind::kShrink) return r.shape.replica;
    Res all = r.shape.total(0);
    for (size_t i = r.releasing.size(); i < r.replica_nodes.size(); ++i) add(all, r.shape.replica);
    return all;
  }
  bool may_disturb(const RunningJob& r) const {
    if (r.stopping || in.now < r.exempt_until) return false;
    if (r.team == job.team) return r.priority < priority;
    return r.priority < priority || reclaiming;
  }
  std::vector<Unit> candidates() const;
  // `soon` with the chosen units' room free.
  ClusterView with(const std::vector<Unit>& chosen) const;
  bool fits_with(const std::vector<Unit>& chosen) const {
    return place_job(with(chosen), job.shape, job.shape.min).outcome == Outcome::kPlaced;
  }
  std::vector<Unit> greedy();
};

std::vector<Unit> Chooser::candidates() const {
  std::vector<Unit> units;
  for (size_t i = 0; i < in.running.size(); ++i) {
    auto& r = in.running[i];
    if (!may_disturb(r)) continue;
    std::multiset<std::string> leaving(r.releasing.begin(), r.releasing.end());
    for (auto& n : r.replica_nodes) {
      if (auto it = leaving.find(n); it != leaving.end()) {
        leaving.erase(it);
        continue;
      }
      units.push_back({i, VictimKind::kShrink, n});
    }
    if (r.can_stop) units.push_back({i, VictimKind::kStop, ""});
  }
  auto key = [&](const Unit& u) {
    auto& r = in.running[u.job];
    bool lends = !borrowing(team_of(in, r.team), usage.at(r.team));
    return std::make_tuple(u.kind == VictimKind::kStop, lends, r.priority, -r.admitted_at,
                           u.kind == VictimKind::kStop ? amount(r.shape.total(r.replicas())) : 0.0, r.id, u.node);
  };
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) { return key(a) < key(b); });
  return units;
}

ClusterView Chooser::with(const std::vector<Unit>& chosen) const {
  ClusterView v = soon;
  std::set<size_t> stopped;
  for (auto& u : chosen)
    if (u.kind == VictimKind::kStop) stopped.insert(u.job);
  for (auto& u : chosen) {
    auto& r = in.running[u.job];
    if (u.kind == VictimKind::kShrink && !stopped.count(u.job)) give(v, u.node, r.shape.replica);
  }
  for (size_t j : stopped) {
    auto& r = in.running[j];
    for (size_t i = 0; i < r.fixed_nodes.size() && i < r.shape.fixed.size(); ++i) give(v, r.fixed_nodes[i], r.shape.fixed[i]);
    std::multiset<std::string> leaving(r.releasing.begin(), r.releasing.end());
    for (auto& n : r.replica_nodes) {
      if (auto it = leaving.find(n); it != leaving.end()) leaving.erase(it);
      else give(v, n, r.shape.replica);
    }
  }
  return v;
}

// Takes units in order until the job fits: a job's replicas only down to MIN, a team never below
// its guarantee for another team. Empty when even all of them would not make room.
std::vector<Unit> Chooser::greedy() {
  std::vector<Unit> chosen;
  std::map<size_t, int> shrunk;
  std::set<size_t> stopped;
  for (auto& u : candidates()) {
    auto& r = in.running[u.job];
    if (stopped.count(u.job)) continue;
    if (u.kind == VictimKind::kShrink &&
        r.replicas() - static_cast<int>(r.releasing.size()) - shrunk[u.job] <= r.shape.min)
      continue;
    Res take = u.kind == VictimKind::kShrink ? r.shape.replica : freed(u);
    if (u.kind == VictimKind::kStop)
      for (int k = 0; k < shrunk[u.job]; ++k) sub(take, r.shape.replica);
    if (r.team != job.team && !keeps_guarantee(team_of(in, r.team), usage[r.team], take)) continue;
    sub(usage[r.team], take);
    chosen.push_back(u);
    if (u.kind == VictimKind::kShrink) ++shrunk[u.job];
    else stopped.insert(u.job);
    if (fits_with(chosen)) return chosen;
  }
  return {};
}

}  // namespace

Preemption choose_victims(const QueueInput& in, const ClusterView& soon, const QueuedJob& job, int priority,
                          const std::map<std::string, Res>& usage) {
  Chooser c{in, soon, job, priority, usage};
  for (auto& r : in.running) c.usage[r.team];
  const TeamQuota* t = team_of(in, job.team);
  if (t && !t->guarantee.empty()) {
    Res after = c.usage[job.team];
    add(after, job.shape.total(job.shape.min));
    c.reclaiming = fits(after, t->guarantee);
  }
  std::vector<Unit> chosen = c.greedy();
  // Give back, last chosen first, every victim the job fits without.
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<Unit> without = chosen;
    without.erase(without.begin() + static_cast<long>(i));
    if (c.fits_with(without)) chosen = std::move(without);
  }
  Preemption p;
  std::set<size_t> stopped;
  for (auto& u : chosen)
    if (u.kind == VictimKind::kStop) stopped.insert(u.job);
  for (auto& u : chosen) {
    auto& id = in.running[u.job].id;
    if (u.kind == VictimKind::kStop) {
      p.victims.push_back({id, VictimKind::kStop, {}, job.id});
      continue;
    }
    if (stopped.count(u.job)) continue;
    auto it = std::find_if(p.victims.begin(), p.victims.end(), [&](const Victim& v) { return v.job == id; });
    if (it == p.victims.end()) it = p.victims.insert(p.victims.end(), {id, VictimKind::kShrink, {}, job.id});
    it->nodes.push_back(u.node);
  }
  return p;
}

}  // namespace yard::sched::policy
