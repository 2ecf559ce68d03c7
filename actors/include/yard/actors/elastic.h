// Who is in an elastic group's next generation: a pure function of the members and candidates the
// driver knows, so the rules can be tested without a cluster (ElasticGroup applies them).
//
// Between MIN and MAX replicas train together. At a step boundary the group:
//  * releases whatever runs on a draining node (members and candidates alike), so the drain ends;
//  * goes on with the surviving members, in their old rank order (rank 0 stays a survivor while
//    there is one: the state comes from the old members' memory, never from a new one);
//  * admits prepared candidates behind them, up to MAX;
//  * regroups when any of that changed membership, unless fewer than MIN would remain: then it
//    waits (the survivors keep their state) until enough candidates are ready;
//  * keeps MAX slots asked for: lost and released ones are replaced by new candidates, which wait
//    for room in the cluster (or for the autoscaler to add a node).
// MAX here is what the job may hold now: the job queue's allotment when it has one (yard/allotment.h),
// never above the group's own MAX. When more replicas are in play than that, the extra ones go:
// candidates first (the latest asked for first), then members the head named (their node is to be
// freed), then members from the highest rank; never below MIN.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace yard::actors {

struct ElasticSlot {
  enum class State {
    kStarting,   // asked for; not running yet (waits for room)
    kPreparing,  // running; loading what it needs before it can join
    kReady,      // prepared; joins at the next step boundary
    kMember,     // a member of the current generation (rank >= 0)
    kLost,       // its process is gone
  };
  State state = State::kStarting;
  int rank = -1;          // in the current generation (members, and lost ones that were members)
  bool draining = false;  // its node is draining: it must leave
  bool asked = false;     // its node is one the job's allotment asks to free: it leaves first
};

struct ElasticPlan {
  bool regroup = false;         // form a new generation with `ranks`
  bool wait = false;            // membership changed but fewer than MIN remain: wait for candidates
  std::vector<size_t> ranks;    // slot indices by their rank in the new generation
  std::vector<size_t> release;  // slots to stop now (on draining nodes, or above MAX)
  int submit = 0;               // new candidates to ask for, keeping MAX slots in play
  int to_queue = 0;             // members released because the job queue allots fewer (a preemption)
  std::string why;              // "rank 2 lost, 1 joined", for the report
};

ElasticPlan plan_elastic(const std::vector<ElasticSlot>& slots, int min, int max);

}  // namespace yard::actors
