// One simulated node: a node manager without worker processes. It listens on its own address and
// answers the head and drivers with the same messages as a real node manager: actors the head
// places here are constructed in this process (any class registered in this binary) and their
// calls answered here; task leases take the node's resources as a real node's do and the tasks
// pushed to its leased workers run here (any function registered in this binary);
// ReturnLease, KillHosted, JobEnded and Shutdown are honoured, and what its actors and leases held
// is given back to the node's resources in the control store through the same scripts. A job's
// program the head's queue starts here (SubmitJob) runs no process: its record says it runs here
// until it is stopped (StopJob), and the head is told that it ended. Unlike a
// real node, a lease that does not fit now is answered at once with no workers (the driver asks
// again), and leases inside placement groups are refused.
//
// Its requests run on its own I/O thread; the control store it shares with the other simulated
// nodes of the process (SimStore) is locked around each use.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/service.h"
#include "node/local_resources.h"
#include "store/tables.h"
#include "yard/internal/redis.h"
#include "yard/registry.h"

namespace yard::sched::sim {

// The control store, shared by a process's simulated nodes.
struct SimStore {
  std::mutex mu;
  std::unique_ptr<detail::Redis> redis;
  std::unique_ptr<store::Tables> tables;
  std::unique_ptr<ResourceLedger> ledger;
};

class SimNode {
 public:
  // `head`: where a job's end is told.
  SimNode(SimStore& store, std::string id, const std::string& host, const std::string& token, Res total,
          std::shared_ptr<zmq::context_t> ctx, std::string head);
  ~SimNode();
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  const std::string& id() const { return id_; }
  const std::string& address() const;
  const Res& total() const { return total_; }
  // Asked to leave (a Shutdown request: `yard stop`, a finished drain): no longer heartbeats.
  bool left() const { return left_.load(); }
  // The head declared it dead while it was silent: its actors are dropped, its resources opened
  // again, as a real node that rejoins empty.
  void rejoin();
  size_t actors() const { return count_.load(); }

 private:
  struct Hosted {
    std::string job;
    bool detached = false;
    Res held;  // given back to the node when the actor goes
    const detail::ActorClass* cls = nullptr;
    std::shared_ptr<void> instance;
  };
  struct Leased {
    std::string job;
    Res held;
  };
  void handle(Incoming in);
  void host(Incoming& in);
  void call(Incoming& in);
  // Runs a pushed task or call on its arguments and answers with its result or what it threw.
  void answer(Incoming& in, const std::string& what, const detail::Invoker& run);
  void lease(Incoming& in);
  void run_task(Incoming& in);
  void return_lease(Incoming& in);
  void kill_hosted(Incoming& in);
  void job_ended(Incoming& in);
  void start_program(Incoming& in);
  void stop_program(Incoming& in);
  void leave(Incoming& in);
  // Drops an actor, giving back what it held.
  void drop(std::map<std::string, Hosted>::iterator it);
  void give(const Res& r);

  SimStore& store_;
  const std::string id_, token_;
  Res total_;
  detail::Channel io_;
  Replies reply_{io_, token_};
  std::map<std::string, Hosted> actors_;  // I/O thread only
  std::map<std::string, Leased> leased_;  // by worker id; I/O thread only
  std::set<std::string> programs_;        // jobs whose program "runs" here; I/O thread only
  const std::string head_;
  std::atomic<size_t> count_{0};
  std::atomic<bool> left_{false};
};

}  // namespace yard::sched::sim
