// What a submitted task, actor call or actor creation carries through the process, and what a
// process knows of an actor it calls. Shared by the submitters, the argument resolver and the
// executor's configuration.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "yard/yard.h"

namespace yard::detail {

struct TaskSpec;

class ActorState {
 public:
  enum class State { kPending, kAlive, kDead };
  std::string id, class_name, name;
  int max_concurrency = 1;
  // I/O thread only.
  State state = State::kPending;
  std::string address;
  std::string same_host_address;  // the address that answered from this host (shared memory)
  std::string death_cause;
  bool infeasible = false;  // it died because no node could ever hold it (calls fail as InfeasibleError)
  bool warned = false;      // the log said it waits for a node that can hold it
  bool created_here = false;    // made by this process's create_actor (not looked up or received)
  bool creation_sent = false;   // its creation request has gone to the head
  bool kill_requested = false;
  bool needs_lookup = false;    // received as a value: ask the head where it lives
  bool lookup_in_flight = false;
  // Calls whose connection broke while they ran: answered once the head says whether the actor
  // restarted (ActorRestarting) or died (ActorDied).
  std::vector<std::shared_ptr<TaskSpec>> lost_calls;
  std::string lost_address;
  std::chrono::steady_clock::time_point lookup_since{};  // retrying while the head is away
  std::deque<std::shared_ptr<TaskSpec>> queue;  // submission order, not yet sent
};

struct TaskSpec {
  // Counted against the process's bound on pending calls (PendingCalls) while it lives.
  TaskSpec();
  ~TaskSpec();
  TaskSpec(const TaskSpec&) = delete;
  TaskSpec& operator=(const TaskSpec&) = delete;
  std::string id;        // also the id of the result object
  uint64_t seq = 0;      // submission order in this process
  std::string shape;     // a task's resources, as a key (leases are per shape)
  std::string function;  // function, method or class name
  std::string concurrency_group;  // an actor call's, when its caller named one
  std::string name;               // the name its caller gave it ("": its function's)
  std::vector<Arg> args;
  int retries_left = 0;
  // A task that no node can hold fails once this passes (TaskOptions::infeasible_timeout).
  std::chrono::steady_clock::time_point infeasible_deadline = std::chrono::steady_clock::time_point::max();
  ActorPtr actor;        // set for actor calls and creation
  bool is_creation = false;
  std::unique_ptr<ActorOptions> actor_options;  // creation only (a queued call stays small)
  std::atomic<int> unresolved{0};
  bool resolved = false;  // I/O thread
  std::string sent_to;    // I/O thread: an actor call's worker when it was sent
};

struct WorkerConfig {
  std::string node_address;  // the node manager this worker belongs to
  std::string token;
  std::string job_id;
  std::string name_space;    // the job's namespace ("": its id)
  std::string worker_id;
  std::string actor_id;      // set for a dedicated actor worker
  std::string head_address;  // the cluster's head (actors, placement groups)
  std::string node_id;
  std::string bind_host;     // the node's interface: other nodes reach this worker there
};

}  // namespace yard::detail
