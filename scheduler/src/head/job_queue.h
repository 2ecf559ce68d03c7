// The job queue at the head. Jobs submitted with a shape (`yard submit --replicas MIN:MAX`) wait
// here until the queue's policy (policy/queue.h) admits them; the head then starts them on the
// driver node. Each job's record, its place in the queue and what it asked to run are in the
// control store (durable), so a head that takes over goes on with the same queue.
//
// What the pool offers a queued job: the nodes' free resources, less what admitted jobs were
// promised and do not hold yet (their shape against what their actors and placement groups hold
// now). A cycle runs every kCycle and after every submission, change and end; why each job waits
// is kept for `yard jobs`.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "head/cluster_nodes.h"
#include "policy/autoscale.h"
#include "policy/queue.h"
#include "result.h"
#include "store/tables.h"

namespace yard::sched {

// What each job's live actors (outside placement groups) and placement groups hold, from the
// actor records and the groups' status rows.
std::map<std::string, Res> held_by_jobs(const std::vector<store::ActorRecord>& actors, const nlohmann::json& groups);

enum class JobAction { kCancel, kHold, kRelease, kSetPriority };

class JobQueue {
 public:
  static constexpr std::chrono::milliseconds kCycle{500};
  // How long a job asked to give up replicas is waited for before its allotment is lowered anyway.
  static constexpr std::chrono::seconds kReleaseGrace{120};
  // What the queue asks of the head.
  struct Hooks {
    // Starts an admitted job's program (`submission`: what `yard submit` asked to run).
    std::function<void(const store::JobRecord& job, const nlohmann::json& submission)> start;
    // What each job's actors and placement groups hold now.
    std::function<std::map<std::string, Res>()> held;
    // Stops a job's program now (SIGTERM on its node): it was asked to stop and its deadline passed.
    std::function<void(const std::string& job)> stop;
    // An event for yard:events (a JSON object: a preemption, a job growing, a requeue).
    std::function<void(const std::string& event)> publish;
  };
  struct Settings {
    std::vector<policy::TeamQuota> teams;  // none: one pool shared by priority
    double starvation_s = 0;
    double usage_half_life_s = 3600;
    double stop_grace_s = 60;  // a job stopped at MIN has this long to checkpoint and exit
    double min_run_s = 0;      // not preempted before it ran this long
    std::vector<policy::NodeType> node_types;  // an autoscaler's: what a job may wait to be started for
  };

  JobQueue(store::Tables& tables, ClusterNodes& nodes, Hooks hooks)
      : tables_(tables), nodes_(nodes), hooks_(std::move(hooks)) {}

  // The cluster configuration's teams, bounds and grace.
  void configure(Settings s) { settings_ = std::move(s); }
  bool has_team(const std::string& name) const {
    for (auto& t : settings_.teams)
      if (t.name == name) return true;
    return false;
  }
  // A new job joins the queue: its id, or why it may not (its team's limits, a bad shape).
  Result<std::string> submit(store::QueueEntry entry, const std::string& entrypoint, const nlohmann::json& submission);
  // One scheduling decision, carried out: the jobs that fit are started.
  void cycle();
  // Runs a cycle when one is due (every kCycle, or sooner after a change).
  void tick();
  // An admitted job ended: it leaves the queue and its room is free.
  void ended(const std::string& id);
  // Whether an admitted job's program that exited (not successfully) is to be queued again: it was
  // asked to stop for a preemption.
  bool requeues_on_exit(const std::string& id) const;
  // The job waits in the queue again, with its priority and its first queueing time; when it is
  // admitted its program runs with the next attempt number (it resumes from its checkpoint).
  void requeue(const std::string& id);
  // cancel, hold, release or set the priority of a job in the queue. A running job's cancel is
  // the caller's (it stops the program); here it only leaves the queue.
  Problem control(const std::string& id, JobAction action, int priority);
  // A node goes at `deadline` (unix seconds; a spot notice): replicas above MIN there leave, those
  // at MIN move where there is room, and jobs that cannot move are stopped and requeued in time to
  // commit a checkpoint (policy::plan_notice).
  void notice(const std::string& node, double deadline);
  // What queued jobs that no node has room for need (their fixed parts and MIN replicas), for the
  // autoscaler: a job waits for a new node as an actor does.
  std::vector<policy::Demand> pending_demand() const;
  // A job of the queue (waiting or admitted), or nullptr.
  const store::JobRecord* find(const std::string& id) const;
  // Why a queued job waits, or nullopt (admitted, or not in the queue).
  std::optional<policy::Waiting> waiting(const std::string& id) const;
  // The queue from the control store (at start-up and after a takeover).
  void rebuild();
  size_t size() const { return jobs_.size(); }

 private:
  static constexpr double kSlowCycleMs = 50;
  // One cycle's decisions, carried out (cycle() times it).
  void decide();
  std::map<std::string, Res> held_now() const;
  policy::QueueInput input(const std::map<std::string, Res>& held) const;
  // Replicas asked to leave that have left (the job holds no more than its allotment): forgotten.
  void settle_releases(const std::map<std::string, Res>& held);
  void shrink(const policy::Victim& v);
  // Asks a job to checkpoint and exit by now + grace (a preemption at MIN, or its time limit).
  // `by` 0: within the configured grace.
  void ask_to_stop(store::JobRecord& j, store::QueueEntry::Stop how, const std::string& why, double now, double by = 0);
  // Time limits reached, and stops whose deadline passed (the program is stopped).
  void enforce_stops(double now);
  void grow(const policy::Grow& g);
  void account_usage(const policy::QueueInput& in);
  void admit(const policy::Admit& a, double now);

  void publish(const nlohmann::json& event) const {
    if (hooks_.publish) hooks_.publish(event.dump());
  }

  store::Tables& tables_;
  ClusterNodes& nodes_;
  Hooks hooks_;
  Settings settings_;
  std::set<std::string> stop_sent_;  // jobs whose program was stopped at their deadline
  std::map<std::string, double> freeing_since_;  // queued jobs victims were chosen for: when
  // Each team's decayed usage (its dominant share of the pool over time), for the queue's order.
  std::map<std::string, double> fair_usage_;
  double usage_at_ = 0;  // when fair_usage_ was last brought up to date
  double usage_saved_at_ = 0;  // when it was last written to the control store
  static constexpr double kUsageSaveS = 2;
  std::map<std::string, std::chrono::steady_clock::time_point> release_asked_;  // jobs giving up replicas: since
  std::map<std::string, store::JobRecord> jobs_;  // in the queue: waiting, or admitted and running
  std::map<std::string, nlohmann::json> submissions_;  // what jobs submitted here asked to run, until admitted
  std::map<std::string, policy::Waiting> waiting_;
  std::chrono::steady_clock::time_point next_cycle_{};
  std::chrono::steady_clock::time_point slow_said_until_{};  // a slow cycle was logged; quiet until then
};

}  // namespace yard::sched
