#include "head/job_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "policy/fair_share.h"
#include "yard/process.h"

namespace yard::sched {

namespace {

double now_s() { return sys::unix_time(); }

// Adds to `unheld` (by node) what a job was promised and does not hold yet: its bundles, at the
// nodes admission put them, until what it holds now (`held`, null: nothing) is accounted for.
void add_unheld(std::map<std::string, Res>& unheld, const store::QueueEntry& q, const Res* held) {
  Res left = held ? *held : Res{};
  auto take = [&](const std::string& node, const Res& bundle) {
    Res* to = nullptr;
    for (auto& [k, v] : bundle) {
      double used = 0;
      if (!left.empty()) {
        auto it = left.find(k);
        double h = it == left.end() ? 0.0 : std::max(0.0, it->second);
        used = std::min(h, v);
        if (it != left.end()) it->second = h - used;
      }
      if (v - used <= 1e-9) continue;
      if (!to) to = &unheld[node];
      (*to)[k] += v - used;
    }
  };
  for (size_t i = 0; i < q.fixed_nodes.size() && i < q.shape.fixed.size(); ++i) take(q.fixed_nodes[i], q.shape.fixed[i]);
  for (auto& n : q.replica_nodes) take(n, q.shape.replica);
}

// Takes what admitted jobs were promised and do not hold yet from the pool, once per node.
void take_unheld(policy::ClusterView& pool, const std::map<std::string, Res>& unheld) {
  for (auto& [node, rest] : unheld) {
    const policy::NodeState* n = pool.find(node);
    if (!n) continue;
    auto i = static_cast<size_t>(n - pool.nodes.data());
    Res a = pool.nodes[i].avail;
    sub(a, rest);
    pool.set_avail(i, std::move(a));
  }
}

}  // namespace

std::map<std::string, Res> held_by_jobs(const std::vector<store::ActorRecord>& actors, const nlohmann::json& groups) {
  std::map<std::string, Res> held;
  for (auto& a : actors)
    if (a.pg.empty() && a.state != store::ActorState::kDead && !a.node.empty()) add(held[a.job], a.resources);
  for (auto& g : groups) {
    if (g.value("state", "") == "REMOVED") continue;
    auto& bundles = g.at("bundles");
    auto& nodes = g.at("bundle_nodes");
    for (size_t i = 0; i < bundles.size() && i < nodes.size(); ++i)
      if (!nodes[i].get<std::string>().empty()) add(held[g.value("job", "")], bundles[i].get<Res>());
  }
  return held;
}

Result<std::string> JobQueue::submit(store::QueueEntry entry, const std::string& entrypoint, const nlohmann::json& submission) {
  using R = Result<std::string>;
  int team_queued = 0;  // counted only against a cap
  auto team = std::find_if(settings_.teams.begin(), settings_.teams.end(), [&](auto& t) { return t.name == entry.team; });
  if (team != settings_.teams.end() && team->max_queued > 0)
    for (auto& [id, j] : jobs_) team_queued += j.queue->team == entry.team && j.queue->admitted_at == 0;
  if (auto no = policy::check_submission(settings_.teams, entry.team, entry.priority, entry.shape, team_queued)) return R::fail(no->message);
  store::JobRecord j;
  j.id = tables_.jobs.new_id();
  j.entrypoint = entrypoint;
  j.status = store::JobStatus::kQueued;
  j.submitted = true;
  entry.queued_at = now_s();
  entry.admitted_at = 0;
  j.queue = std::move(entry);
  tables_.jobs.enqueue(j, submission.dump());
  spdlog::info("job {} queued: team '{}', priority {}, replicas {}:{} of {}", j.id, j.queue->team, j.queue->priority,
               j.queue->shape.min, j.queue->shape.max, res_text(j.queue->shape.replica));
  std::string id = j.id;
  jobs_.emplace(id, std::move(j));
  submissions_[id] = submission;  // read from the store again only after a rebuild
  next_cycle_ = {};
  return R::ok(id);
}

policy::QueueInput JobQueue::input(const std::map<std::string, Res>& held) const {
  policy::QueueInput in;
  in.teams = settings_.teams;
  in.starvation_s = settings_.starvation_s;
  in.node_types = settings_.node_types;
  in.now = now_s();
  in.pool = nodes_.view();
  std::map<std::string, Res> unheld;  // by node
  for (auto& [id, j] : jobs_) {
    auto& q = *j.queue;
    if (q.admitted_at == 0) {
      auto f = freeing_since_.find(id);
      in.queued.push_back({id, q.team, q.priority, q.queued_at, q.shape, q.held, f == freeing_since_.end() ? 0 : f->second});
      continue;
    }
    policy::RunningJob r;
    r.id = id;
    r.team = q.team;
    r.priority = q.priority;
    r.admitted_at = q.admitted_at;
    // Replicas above MIN are given up at a step boundary; a job at MIN is checkpointed, stopped
    // and queued again. One asked to stop already is not disturbed again.
    r.stopping = q.stop != store::QueueEntry::Stop::kNo;
    r.exempt_until = q.admitted_at + settings_.min_run_s;
    r.shape = q.shape;
    r.fixed_nodes = q.fixed_nodes;
    r.replica_nodes = q.replica_nodes;
    r.releasing = q.releasing;
    auto h = held.find(id);
    if (h != held.end()) r.held = h->second;
    in.running.push_back(std::move(r));
    add_unheld(unheld, q, h == held.end() ? nullptr : &h->second);
  }
  take_unheld(in.pool, unheld);
  return in;
}

// What each job holds: its actors and groups (the head's records, through the hook) and its task
// leases (as the live nodes' managers report them), so that a team's tasks count as its actors do.
std::map<std::string, Res> JobQueue::held_now() const {
  std::map<std::string, Res> held;
  if (hooks_.held) held = hooks_.held();
  try {
    for (auto& [node, text] : tables_.cluster.lease_holdings()) {
      if (nodes_.dead(node) || !nodes_.find(node)) continue;
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_object()) continue;
      for (auto& [job, res] : j.items())
        if (res.is_object()) add(held[job], res.get<Res>());
    }
  } catch (const std::exception& e) {
    spdlog::debug("reading the nodes' task leases: {}", e.what());  // counted at the next cycle
  }
  return held;
}

void JobQueue::cycle() {
  auto t0 = std::chrono::steady_clock::now();
  next_cycle_ = t0 + kCycle;
  if (jobs_.empty()) return;
  decide();
  // A slow cycle delays every decision and every request the head serves meanwhile: said at most
  // every 10 s, with the queue's size.
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (ms > kSlowCycleMs && t0 >= slow_said_until_) {
    slow_said_until_ = t0 + std::chrono::seconds(10);
    spdlog::warn("the job queue's cycle took {:.1f} ms for {} jobs", ms, jobs_.size());
  }
}

void JobQueue::decide() {
  std::map<std::string, Res> held;
  bool any_admitted = std::any_of(jobs_.begin(), jobs_.end(), [](auto& e) { return e.second.queue->admitted_at > 0; });
  if (any_admitted) held = held_now();
  // The pool's free room read now, after what the jobs hold: a replica seen gone there is seen
  // gone from its node too (the view is otherwise up to 250 ms old, and a job could be preempted
  // again for room already freed).
  bool any_waiting = std::any_of(jobs_.begin(), jobs_.end(), [](auto& e) { return e.second.queue->admitted_at == 0; });
  if (any_waiting) nodes_.refresh_free();
  settle_releases(held);
  auto in = input(held);
  account_usage(in);
  in.fair_usage = fair_usage_;
  auto d = policy::schedule_queue(in);
  waiting_.clear();
  for (auto& w : d.waiting) waiting_[w.job] = w;
  for (auto& v : d.preempt) {
    freeing_since_[v.for_job] = in.now;
    if (v.kind == policy::VictimKind::kShrink) {
      shrink(v);
      continue;
    }
    auto it = jobs_.find(v.job);
    if (it != jobs_.end())
      ask_to_stop(it->second, store::QueueEntry::Stop::kRequeue, fmt::format("stopped at MIN for {} at {:.0f}", v.for_job, in.now),
                  in.now);
  }
  for (auto& a : d.admit) admit(a, in.now);
  for (auto& g : d.grow) grow(g);
  enforce_stops(in.now);
}

namespace {
// How many replicas a job holds: what it holds beyond its fixed parts, counted in replicas by the
// scarcest of a replica's resources (its trainer slots, say, not the CPU its other actors share).
int replicas_held(const policy::JobShape& shape, Res held) {
  sub(held, shape.total(0));
  double n = std::numeric_limits<double>::infinity();
  for (auto& [k, v] : shape.replica)
    if (v > 0) n = std::min(n, std::max(0.0, held[k]) / v);
  return std::isfinite(n) ? static_cast<int>(std::floor(n + 1e-9)) : 0;
}
}  // namespace

void JobQueue::settle_releases(const std::map<std::string, Res>& held) {
  auto now = std::chrono::steady_clock::now();
  for (auto& [id, j] : jobs_) {
    auto& q = *j.queue;
    if (q.releasing.empty()) continue;
    auto h = held.find(id);
    int allotted = q.allotted();
    int holds = replicas_held(q.shape, h == held.end() ? Res{} : h->second);
    auto asked = release_asked_.try_emplace(id, now).first->second;
    // A group that never lets go (a job without an elastic group, or one that ignores its
    // allotment) keeps the room it holds; after kReleaseGrace the head stops waiting for it.
    bool overdue = now - asked > kReleaseGrace;
    if (holds > allotted && !overdue) continue;
    if (holds > allotted)
      spdlog::warn("job {}: holds {} replicas {:.0f} s after being asked to keep {}; its allotment is lowered anyway", id,
                   holds, std::chrono::duration<double>(now - asked).count(), allotted);
    for (auto& n : q.releasing)
      if (auto it = std::find(q.replica_nodes.begin(), q.replica_nodes.end(), n); it != q.replica_nodes.end())
        q.replica_nodes.erase(it);
    spdlog::info("job {}: {} replicas released; it has {}", id, q.releasing.size(), q.replica_nodes.size());
    q.releasing.clear();
    release_asked_.erase(id);
    tables_.jobs.save_queue(id, q);
  }
}

// A running job gives up replicas above MIN for another: its elastic group reads the smaller
// allotment at its next step boundary and lets them go.
void JobQueue::shrink(const policy::Victim& v) {
  auto it = jobs_.find(v.job);
  if (it == jobs_.end() || v.nodes.empty()) return;
  auto& q = *it->second.queue;
  q.releasing.insert(q.releasing.end(), v.nodes.begin(), v.nodes.end());
  int left = q.allotted();
  q.preempted = fmt::format("{} replica{} released (on {}) for {} at {:.0f}", v.nodes.size(), v.nodes.size() == 1 ? "" : "s",
                            fmt::join(v.nodes, ", "), v.for_job, now_s());
  tables_.jobs.save_queue(it->first, q);
  spdlog::info("job {} preempted: {} replicas leave (on {}) for job {}; it goes on with {}", v.job, v.nodes.size(),
               fmt::join(v.nodes, ", "), v.for_job, left);
  publish({{"type", "job_preempted"}, {"job_id", v.job}, {"how", "shrink"}, {"replicas_released", v.nodes.size()},
           {"nodes", v.nodes}, {"replicas_left", left}, {"for_job", v.for_job}, {"time", now_s()}});
}

void JobQueue::ask_to_stop(store::JobRecord& j, store::QueueEntry::Stop how, const std::string& why, double now, double by) {
  auto& q = *j.queue;
  if (q.stop != store::QueueEntry::Stop::kNo || q.admitted_at == 0) return;
  q.stop = how;
  q.stop_by = by > 0 ? by : now + settings_.stop_grace_s;
  bool requeue = how == store::QueueEntry::Stop::kRequeue;
  if (requeue) q.preempted = why;
  tables_.jobs.save_queue(j.id, q);
  spdlog::info("job {} asked to stop within {:.0f} s ({}){}", j.id, q.stop_by - now, why,
               requeue ? "; it is queued again" : "");
  publish({{"type", requeue ? "job_preempted" : "job_time_limit"}, {"job_id", j.id}, {"how", "stop"}, {"why", why},
           {"stop_by", q.stop_by}, {"requeued", requeue}, {"time", now}});
}

void JobQueue::enforce_stops(double now) {
  for (auto& [id, j] : jobs_) {
    auto& q = *j.queue;
    if (q.admitted_at == 0) continue;
    if (q.stop == store::QueueEntry::Stop::kNo && q.time_limit > 0 && now >= q.admitted_at + q.time_limit)
      ask_to_stop(j, store::QueueEntry::Stop::kEnd, fmt::format("its time limit of {:g} s", q.time_limit), now);
    if (q.stop == store::QueueEntry::Stop::kNo || now < q.stop_by || stop_sent_.count(id)) continue;
    spdlog::warn("job {} did not stop within its {:.0f} s grace: its program is stopped", id, settings_.stop_grace_s);
    stop_sent_.insert(id);
    if (hooks_.stop) hooks_.stop(id);
  }
}

void JobQueue::notice(const std::string& node, double deadline) {
  auto held = held_now();
  double now = now_s();
  auto plan = policy::plan_notice(input(held), node);
  std::string why = fmt::format("the notice on node {} (it goes at {:.0f})", node, deadline);
  for (auto& v : plan.leave) {
    auto leave = v;
    leave.for_job = why;
    shrink(leave);
  }
  for (auto& m : plan.move) {
    auto& q = *jobs_.at(m.job).queue;
    for (size_t i = 0; i < m.from.size() && i < m.to.size(); ++i)
      if (auto it = std::find(q.replica_nodes.begin(), q.replica_nodes.end(), m.from[i]); it != q.replica_nodes.end()) *it = m.to[i];
    tables_.jobs.save_queue(m.job, q);
    spdlog::info("job {}: {} replicas move off node {} ({}) to {}", m.job, m.from.size(), node, why, fmt::join(m.to, ", "));
  }
  // A stopped job's checkpoint is committed well before the node goes: 10 s before the deadline
  // (at least a few seconds from now).
  double by = std::max(now + 3, deadline - 10);
  for (auto& id : plan.stop)
    if (auto it = jobs_.find(id); it != jobs_.end())
      ask_to_stop(it->second, store::QueueEntry::Stop::kRequeue, "stopped for " + why, now, by);
  next_cycle_ = {};
}

bool JobQueue::requeues_on_exit(const std::string& id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() && it->second.queue->admitted_at > 0 && it->second.queue->stop == store::QueueEntry::Stop::kRequeue;
}

void JobQueue::requeue(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  auto& j = it->second;
  auto& q = *j.queue;
  q.admitted_at = 0;
  q.fixed_nodes.clear();
  q.replica_nodes.clear();
  q.releasing.clear();
  q.stop = store::QueueEntry::Stop::kNo;
  q.stop_by = 0;
  ++q.requeues;
  j.status = store::JobStatus::kQueued;
  j.exit_code = 0;
  j.end = 0;
  j.proc_pid = 0;
  j.driver_pid = 0;
  tables_.jobs.save(j);
  stop_sent_.erase(id);
  release_asked_.erase(id);
  spdlog::info("job {} is queued again (requeue {}), first queued {:.0f} s ago", id, q.requeues, now_s() - q.queued_at);
  publish({{"type", "job_requeued"}, {"job_id", id}, {"requeues", q.requeues}, {"time", now_s()}});
  next_cycle_ = {};
}

// Room nobody queued can use: the job's allotment grows; its elastic group asks for the replicas.
void JobQueue::grow(const policy::Grow& g) {
  auto it = jobs_.find(g.job);
  if (it == jobs_.end() || it->second.queue->admitted_at == 0 || g.nodes.empty()) return;
  auto& q = *it->second.queue;
  q.replica_nodes.insert(q.replica_nodes.end(), g.nodes.begin(), g.nodes.end());
  tables_.jobs.save_queue(it->first, q);
  spdlog::info("job {} grows by {} replicas to {}", g.job, g.nodes.size(), q.replica_nodes.size());
}

// What each team held since the last cycle, as a share of the pool, added to its decayed usage.
void JobQueue::account_usage(const policy::QueueInput& in) {
  double dt = usage_at_ > 0 ? std::max(0.0, in.now - usage_at_) : 0;
  usage_at_ = in.now;
  Res total;
  for (auto& n : in.pool.nodes) add(total, n.total);
  auto usage = policy::team_usage(in.running);
  for (auto& [team, u] : fair_usage_) u = policy::decay_usage(u, 0, dt, settings_.usage_half_life_s);
  for (auto& [team, held] : usage) fair_usage_[team] += policy::dominant_share(held, total) * dt;
  // Kept in the control store every few seconds, so that a new head orders the queue the same way.
  if (in.now - usage_saved_at_ >= kUsageSaveS && !fair_usage_.empty()) {
    tables_.jobs.save_usage({fair_usage_, in.now});
    usage_saved_at_ = in.now;
  }
}

void JobQueue::tick() {
  if (!jobs_.empty() && std::chrono::steady_clock::now() >= next_cycle_) cycle();
}

void JobQueue::admit(const policy::Admit& a, double now) {
  auto it = jobs_.find(a.job);
  if (it == jobs_.end()) return;
  auto& j = it->second;
  auto& q = *j.queue;
  q.admitted_at = now;
  freeing_since_.erase(a.job);
  q.fixed_nodes = a.fixed_nodes;
  q.replica_nodes = a.replica_nodes;
  j.status = store::JobStatus::kRunning;
  nlohmann::json sub;
  if (auto kept = submissions_.find(j.id); kept != submissions_.end()) {
    sub = std::move(kept->second);
    submissions_.erase(kept);
  } else if (auto text = tables_.jobs.submission(j.id)) {
    sub = nlohmann::json::parse(*text, nullptr, false);
  }
  if (!sub.is_object()) {
    spdlog::error("job {}: what it asked to run is missing from the control store; it fails", j.id);
    j.status = store::JobStatus::kFailed;
    j.end = now;
    j.exit_code = -1;
    tables_.jobs.save(j);
    tables_.jobs.leave_queue(j.id);
    jobs_.erase(it);
    return;
  }
  tables_.jobs.save(j);
  spdlog::info("job {} admitted after {:.1f} s in the queue: {} replicas", j.id, now - q.queued_at, q.replica_nodes.size());
  if (hooks_.start) hooks_.start(j, sub);
}

void JobQueue::ended(const std::string& id) {
  submissions_.erase(id);
  if (!jobs_.erase(id)) return;
  waiting_.erase(id);
  release_asked_.erase(id);
  stop_sent_.erase(id);
  freeing_since_.erase(id);
  tables_.jobs.leave_queue(id);
  next_cycle_ = {};
}

Problem JobQueue::control(const std::string& id, JobAction action, int priority) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return "job " + id + " is not in the queue";
  auto& j = it->second;
  auto& q = *j.queue;
  bool admitted = q.admitted_at > 0;
  switch (action) {
    case JobAction::kCancel:
      if (admitted) {
        // The caller stops its program; ended() follows. A job being preempted is not queued again.
        if (q.stop == store::QueueEntry::Stop::kRequeue) q.stop = store::QueueEntry::Stop::kEnd;
        break;
      }
      j.status = store::JobStatus::kStopped;
      j.end = now_s();
      tables_.jobs.save(j);
      spdlog::info("job {} cancelled while queued", id);
      ended(id);
      return std::nullopt;
    case JobAction::kHold:
    case JobAction::kRelease:
      if (admitted) return "job " + id + " is running: only a queued job can be held or released";
      q.held = action == JobAction::kHold;
      break;
    case JobAction::kSetPriority: {
      store::QueueEntry probe = q;
      probe.shape.min = probe.shape.max = 0;
      if (auto no = policy::check_submission(settings_.teams, q.team, priority, probe.shape, 0); no && no->kind == policy::Refusal::kPriorityTooHigh)
        return no->message;
      q.priority = priority;
      break;
    }
  }
  if (admitted) tables_.jobs.save_queue(id, q);  // what its runner wrote stays
  else tables_.jobs.save(j);
  next_cycle_ = {};
  return std::nullopt;
}

std::vector<policy::Demand> JobQueue::pending_demand() const {
  std::vector<policy::Demand> out;
  for (auto& [id, w] : waiting_) {
    using R = policy::WaitReason;
    if (w.why.reason != R::kNoRoom && w.why.reason != R::kNodeStarting && w.why.reason != R::kInfeasible) continue;
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.queue->admitted_at > 0) continue;
    auto& shape = it->second.queue->shape;
    bool own = shape.strategy == policy::BundleStrategy::kStrictSpread;
    for (size_t i = 0; i < shape.fixed.size(); ++i)
      out.push_back({shape.fixed[i], "job " + id + " fixed part " + std::to_string(i), own, id});
    for (int i = 0; i < shape.min; ++i) out.push_back({shape.replica, "job " + id + " replica " + std::to_string(i), own, id});
  }
  return out;
}

const store::JobRecord* JobQueue::find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::optional<policy::Waiting> JobQueue::waiting(const std::string& id) const {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return std::nullopt;
  return it->second;
}

void JobQueue::rebuild() {
  jobs_.clear();
  submissions_.clear();
  waiting_.clear();
  // The teams' usage as the last head left it. The first cycle brings it up to date: it decays
  // over the time there was no head, and what the running jobs hold counts for that time.
  auto u = tables_.jobs.usage();
  fair_usage_ = std::move(u.teams);
  usage_at_ = u.at;
  usage_saved_at_ = u.at;
  for (auto& id : tables_.jobs.queued()) {
    auto rec = tables_.jobs.get(id);
    // A preempted job whose program exited while there was no head is queued again now.
    bool requeue = rec && rec->queue && rec->end > 0 && rec->queue->stop == store::QueueEntry::Stop::kRequeue &&
                   rec->status != store::JobStatus::kSucceeded;
    bool live = rec && rec->queue && (requeue || rec->end == 0) &&
                (requeue || rec->status == store::JobStatus::kQueued || rec->status == store::JobStatus::kRunning);
    if (!live) {
      if (rec && !rec->queue) spdlog::error("job {}: its queue record cannot be read; it leaves the queue", id);
      tables_.jobs.leave_queue(id);
      continue;
    }
    // Admitted but never started (a head lost in between): it waits again.
    if (rec->status == store::JobStatus::kQueued) rec->queue->admitted_at = 0;
    jobs_.emplace(id, std::move(*rec));
    if (requeue) this->requeue(id);
  }
  if (!jobs_.empty()) spdlog::info("the job queue has {} jobs from the control store", jobs_.size());
  next_cycle_ = {};
}

}  // namespace yard::sched
