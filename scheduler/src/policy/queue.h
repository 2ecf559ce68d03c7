// The job queue's policies: which queued jobs are admitted and at what size, which running jobs
// grow, and whom to preempt (shrink or stop) for a job that does not fit. Pure functions over a
// read-only picture of the pool, the teams' quotas and the jobs: no Redis, no clock. The head
// gathers the input, asks once per cycle and carries the decision out (admitting is placing the
// job's group; shrinking asks its elastic group to release replicas at a step boundary; stopping
// checkpoints the job and requeues it).
//
// The rules (after Kueue, Volcano and Slurm; docs/operations.md says them for users):
// - A job's shape is its fixed parts (driver, aligners, checkpointers) and its elastic replicas,
//   MIN..MAX of one replica's resources. It is admitted when its fixed parts and MIN replicas
//   can be placed together (a gang: all or nothing), and then grows toward MAX with room nobody
//   queued can use.
// - Queue order: effective priority, then the team's fair share (decayed usage over weight,
//   lowest first), then the time it was queued. A job that cannot be admitted does not block the
//   jobs behind it (best-effort FIFO); the room being freed for it is kept for it.
// - Teams: a guarantee (room the team is sure of: lent while it is idle, reclaimed when it needs
//   it), a ceiling (the most it may use, borrowing included), a weight, a highest priority and a
//   cap on queued jobs.
// - Preemption: a job that does not fit may take room from lower-priority jobs of its own team,
//   lower-priority jobs of teams above their guarantee, and, while its team is within its own
//   guarantee, any job of a team above its guarantee (reclaim). No team is taken below its
//   guarantee for another. Replicas above MIN go first (cheapest: the group shrinks at a step
//   boundary and loses nothing), then whole jobs at MIN (checkpointed, stopped and requeued).
//   Among each: borrowing teams first, lowest priority, most recently admitted. Victims that turn
//   out not to be needed are dropped again (fewest disturbed). Growth never preempts.
//   A job that victims were chosen for waits kVictimSettleS for them before any more are chosen.
// - Starvation: a job queued longer than the bound runs at its team's highest priority.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "policy/autoscale.h"
#include "policy/placement.h"
#include "policy/waiting.h"

namespace yard::sched::policy {

struct TeamQuota {
  std::string name;
  double weight = 1;
  Res guarantee;         // empty: none
  Res ceiling;           // empty: no ceiling
  int max_priority = 0;  // the highest priority its jobs may ask for
  int max_queued = 0;    // the most jobs it may have waiting (0: no cap)
};

struct JobShape {
  std::vector<Res> fixed;  // one bundle per fixed part
  Res replica;             // one elastic replica
  int min = 0, max = 0;    // elastic replicas
  BundleStrategy strategy = BundleStrategy::kSpread;

  // Everything the job holds with `replicas` replicas.
  Res total(int replicas) const;
};

struct QueuedJob {
  std::string id, team;
  int priority = 0;
  double queued_at = 0;  // seconds, on the clock of QueueInput::now (a requeued job keeps its first)
  JobShape shape;
  bool held = false;
  double freeing_since = 0;  // when victims were last chosen for it (0: never)
};

// How long a job that victims were chosen for waits for them before more are chosen: the room
// they free reaches the pool's picture a moment after their replicas are gone.
constexpr double kVictimSettleS = 10;

struct RunningJob {
  std::string id, team;
  int priority = 0;
  double admitted_at = 0;
  double exempt_until = 0;  // not preempted before this time (its minimum run time)
  JobShape shape;
  std::vector<std::string> fixed_nodes;    // the node of each fixed part
  std::vector<std::string> replica_nodes;  // the node of each replica it has now
  std::vector<std::string> releasing;      // nodes of replicas asked to leave, still there
  bool stopping = false;                   // preempted at MIN: checkpointing and stopping
  bool can_stop = true;                    // may be stopped whole (else only shrunk to MIN)
  Res held;  // what its actors and placement groups hold now, which may be more than its shape

  int replicas() const { return static_cast<int>(replica_nodes.size()); }
};

struct QueueInput {
  std::vector<TeamQuota> teams;             // empty: no quotas, one pool shared by priority
  std::map<std::string, double> fair_usage;  // a team's decayed usage (fair_share.h)
  std::vector<QueuedJob> queued;
  std::vector<RunningJob> running;
  ClusterView pool;  // nodes that take work, with what is free on them now
  // The node types an autoscaler may start (none: no autoscaler): a job no running node could hold
  // waits for one of them (kNodeStarting) instead of being infeasible.
  std::vector<NodeType> node_types;
  double now = 0;
  double starvation_s = 0;  // 0: no bound
};

struct Admit {
  std::string job;
  std::vector<std::string> fixed_nodes, replica_nodes;  // where its bundles go
};
struct Grow {
  std::string job;
  std::vector<std::string> nodes;  // one per new replica
};
enum class VictimKind { kShrink, kStop };
struct Victim {
  std::string job;
  VictimKind kind = VictimKind::kShrink;
  std::vector<std::string> nodes;  // kShrink: the nodes of the replicas to release
  std::string for_job;             // who takes the room (for the event and the job's log)
};
struct Waiting {
  std::string job;
  Wait why;
  int effective_priority = 0;
};

struct QueueDecision {
  std::vector<Admit> admit;
  std::vector<Grow> grow;
  std::vector<Victim> preempt;
  std::vector<Waiting> waiting;  // every queued job not admitted, in queue order
};

// One scheduling cycle. Deterministic for one input.
QueueDecision schedule_queue(const QueueInput& in);

// A node is to go at a deadline (a spot notice: `yard drain NODE --deadline`; it no longer takes
// work, so `in.pool` lacks it). What each admitted job with a part there does:
//  * replicas above MIN there leave at a step boundary (`leave`: their nodes; the allotment drops);
//  * replicas that would take the job below MIN move: their allotment is kept, with room for them
//    elsewhere (`move`: one new node per replica), when the pool has that room;
//  * otherwise (no room elsewhere, or a fixed part is there) the job is stopped and requeued
//    (`stop`), so that it commits a checkpoint before the node goes.
struct NoticePlan {
  std::vector<Victim> leave;  // kShrink: the noticed node, once per replica there
  struct Move {
    std::string job;
    std::vector<std::string> from, to;
  };
  std::vector<Move> move;
  std::vector<std::string> stop;
};
NoticePlan plan_notice(const QueueInput& in, const std::string& node);

// ---- parts of the cycle, exposed for their tests -----------------------------------------------

// A team's usage: what its running jobs hold.
std::map<std::string, Res> team_usage(const std::vector<RunningJob>& running);
// The priority a queued job is ordered and preempts with: its own, or its team's highest once it
// has waited past the starvation bound.
int effective_priority(const QueueInput& in, const QueuedJob& j);
// The pool with the room being freed counted as free: replicas asked to leave, jobs stopping.
ClusterView soon_view(const QueueInput& in);
// The queued jobs' positions in queue order.
std::vector<size_t> queue_order(const QueueInput& in);

struct Preemption {
  std::vector<Victim> victims;  // empty: none would make room
};
// Whom to disturb, and how, so that `job` fits on `soon` (the pool with the room already being
// freed counted as free). `usage` is every team's usage now.
Preemption choose_victims(const QueueInput& in, const ClusterView& soon, const QueuedJob& job, int priority,
                          const std::map<std::string, Res>& usage);

// Where the job's fixed parts and `replicas` replicas go on `view`, or a decision to wait.
GroupDecision place_job(const ClusterView& view, const JobShape& shape, int replicas);

}  // namespace yard::sched::policy
