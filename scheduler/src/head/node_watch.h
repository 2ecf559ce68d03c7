// The head's failure detector and drains. Every check (every 250 ms) reads which nodes stopped
// heartbeating; a silent node is declared dead once policy::Liveness allows it (never while the
// control store is away or this process stalled), a node heartbeating again is taken back, and
// drains in progress are finished or given up. `yard drain` and the autoscaler's idle nodes come
// here; what a death or a drain means for actors, groups and jobs is asked of their owners.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/service.h"
#include "head/actors.h"
#include "head/cluster_nodes.h"
#include "head/groups.h"
#include "head/head_wiring.h"
#include "head/job_queue.h"
#include "head/job_requests.h"
#include "policy/liveness.h"
#include "store/tables.h"

namespace yard::sched {

class NodeWatch {
 public:
  static constexpr std::chrono::milliseconds kCheckPeriod{250};
  struct Context : HeadWiring {
    ActorManager& actors;
    GroupManager& groups;
    JobQueue& queue;
    JobRequests& job_requests;
    double heartbeat_timeout_s;
    std::function<bool()> may_act;                      // this head holds a valid lease
    std::function<void(const std::string&)> publish;    // an event on yard:events
    std::function<void(const std::string&)> missed;     // a node's heartbeat expired (metrics)
    std::function<void(const std::string&)> stop_node;  // asks the node manager at this address to stop
  };
  explicit NodeWatch(Context c);

  // The loop starts checking now: the first judgement waits a full timeout.
  void begin(Clock::time_point now) { liveness_.begin(now); }
  // Every kCheckPeriod: silent nodes, nodes back, resources read again, drains.
  void check();
  // `yard drain NODE` (and a spot notice, which drains with a deadline).
  void on_drain(Incoming& in);
  // Nothing new goes to the node, its actors move, it is stopped once idle (or at the timeout
  // with `force`). `routing` "" : nobody waits for the answer.
  void drain(const std::string& id, std::chrono::milliseconds timeout, bool force, const std::string& routing,
             uint64_t req);

 private:
  void node_died(const std::string& id);
  void move_off(const std::string& node);
  void check_drains();

  Context c_;
  uint64_t seen_reconnects_ = 0;
  policy::Liveness liveness_;         // whether silent nodes may be judged now
  Clock::time_point last_refresh_{};  // the nodes' resources last read in full
  struct Drain {
    std::string node, routing;
    uint64_t req;
    Clock::time_point deadline;
    bool force;
  };
  std::vector<Drain> drains_;
};

}  // namespace yard::sched
