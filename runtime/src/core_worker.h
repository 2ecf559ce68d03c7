// CoreWorker: what every Switchyard process that runs user code has — a driver or a worker.
//
// It owns the process's IoLoop and MemoryStore and three parts:
//  * the task submitter (leases workers from the node manager, pipelines tasks to them
//    directly, retries a task whose worker crashed, fails it with WorkerCrashed after that);
//  * the actor submitter (creates actors through the node manager, then sends calls straight to
//    the actor's worker, in order; a lost connection means ActorDied);
//  * in a worker process, the executor: a fiber per call on the main thread, fed from the I/O
//    thread through a fiber channel, so a call blocked in get() suspends only its own fiber.
// Submitter state lives on the I/O thread only: user threads post work to it, no locks.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io_loop.h"
#include "memory_store.h"
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
  std::string death_cause;
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
  std::string id;        // also the id of the result object
  uint64_t seq = 0;      // submission order in this process
  std::string shape;     // a task's resources, as a key (leases are per shape)
  std::string function;  // function, method or class name
  std::vector<Arg> args;
  int retries_left = 0;
  ActorPtr actor;        // set for actor calls and creation
  bool is_creation = false;
  ActorOptions actor_options;
  std::atomic<int> unresolved{0};
  bool resolved = false;  // I/O thread
};

struct WorkerConfig {
  std::string node_address;  // the node manager this worker belongs to
  std::string token;
  std::string job_id;
  std::string worker_id;
  std::string actor_id;      // set for a dedicated actor worker
  std::string head_address;  // the cluster's head (actors, placement groups)
  std::string node_id;
  std::string bind_host;     // the node's interface: other nodes reach this worker there
};

class CoreWorker {
 public:
  // Driver: connects to the head at `address`, registers a job. Throws ConnectionError/AuthError.
  CoreWorker(const std::string& address, const std::string& token, std::chrono::milliseconds timeout);
  // Worker: binds, then run_worker() registers with the node manager and serves.
  explicit CoreWorker(WorkerConfig cfg);
  ~CoreWorker();

  [[noreturn]] void run_worker();

  Holder submit_task(const std::string& function, std::vector<Arg> args, const TaskOptions& o);
  Holder put(Bytes value);
  Bytes get(const std::string& id, std::chrono::milliseconds timeout);
  std::vector<size_t> wait(const std::vector<std::string>& ids, size_t num, std::chrono::milliseconds t);
  ActorPtr create_actor(const std::string& cls, std::vector<Arg> args, const ActorOptions& o);
  ActorPtr lookup_actor(const std::string& name, const std::string& cls);
  ActorPtr actor_from_id(const std::string& id, const std::string& cls);
  Holder submit_actor_call(const ActorPtr& a, const std::string& method, std::vector<Arg> args);
  void kill_actor(const ActorPtr& a);
  std::pair<std::string, std::string> control_store();
  // True when it was created at once.
  bool create_placement_group(const std::string& id, const std::string& strategy,
                              const std::vector<std::map<std::string, double>>& bundles, const std::string& name);
  // State and bundle nodes once created (or the timeout passed: state PENDING).
  std::pair<std::string, std::vector<std::string>> wait_placement_group(const std::string& id,
                                                                        std::chrono::milliseconds timeout);
  void remove_placement_group(const std::string& id);
  const std::string& node_id() const { return node_id_; }
  void release(const std::string& id, const std::string& owner);
  std::pair<std::string, std::string> export_ref(const Holder& h);
  Holder import_ref(const std::string& id, const std::string& owner);

  // Ends the job at the node manager (its workers stop) and stops the I/O thread.
  void disconnect();
  const std::string& head_address() const { return head_; }
  const std::string& job_id() const { return job_id_; }

 private:
  struct Lease {
    std::string worker_id, address;
    int inflight = 0;
    std::string node;  // the node manager that granted it (where it goes back)
    std::string shape;
    std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();
  };
  // Tasks of one resource shape: their queue and the state of leasing workers for them.
  struct Shape {
    std::map<std::string, double> need;
    std::string node_id;
    bool soft = false, spread = false;
    std::string placement_group;
    int bundle_index = -1;
    std::deque<std::shared_ptr<TaskSpec>> queue;
    bool lease_in_flight = false, spill_in_flight = false;
    std::chrono::steady_clock::time_point saturated_until{};
  };

  std::string new_id();
  std::shared_ptr<TaskSpec> make_spec(std::string fn, std::vector<Arg> args);
  void resolve_then(const std::shared_ptr<TaskSpec>& spec, std::function<void()> on_loop);
  bool fill_args(wire::PushTask::Builder b, OutMessage& m, TaskSpec& spec);
  void fail(const std::string& id, int code, const std::string& msg);
  void on_error_reply(const std::string& id, wire::Error::Reader e);
  void complete_from_reply(const std::string& id, const InMessage& r);

  // I/O thread only: tasks.
  void pump_tasks();
  void send_task(const std::shared_ptr<TaskSpec>& spec, Lease& w);
  void request_lease(const std::string& shape, const std::string& node = {}, bool spilled = false);
  void return_idle_leases();
  // I/O thread only: actors.
  void send_creation(const std::shared_ptr<TaskSpec>& spec);
  void flush_actor(const ActorPtr& a);
  void send_actor_call(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec);
  void actor_dead(const ActorPtr& a, const std::string& cause);
  void actor_connection_lost(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec, const std::string& address,
                             const std::string& why, bool delivered);
  void lookup_address(const ActorPtr& a);
  bool retry_through_head_outage(const ActorPtr& a, const InMessage* r, const std::optional<LocalError>& err,
                                 std::function<void()> again);

  // Ownership: serving our objects to borrowers, fetching borrowed ones.
  bool serve_objects(IoLoop::Incoming& in);  // true when the request was an object request
  void ensure_fetched(const std::string& id);

  // Worker side.
  void handle_request(IoLoop::Incoming in);
  void execute(IoLoop::Incoming& in);
  void instantiate(IoLoop::Incoming& in);
  void reply_error(IoLoop::Incoming& in, wire::ErrorCode code, const std::string& msg,
                   const std::string& type = {}, const std::string& location = {});

  bool worker_mode_ = false;
  std::string token_;
  std::string head_;   // where leases go: the head for a driver, its node manager for a worker
  std::string gcs_;    // where actor and placement-group requests go: the cluster's head
  std::string node_id_;
  std::string job_id_;
  WorkerConfig wcfg_;
  std::string id_prefix_;
  std::atomic<uint64_t> id_seq_{0};
  MemoryStore store_;
  std::unique_ptr<IoLoop> io_;

  // I/O thread only.
  std::map<std::string, Shape> shapes_;
  std::vector<Lease> leases_;

  std::chrono::steady_clock::time_point last_task_activity_{};

  // Objects that left this process, kept for their borrowers (id -> holder, count of exports).
  std::mutex own_mu_;
  std::unordered_map<std::string, std::pair<Holder, int>> exported_;  // guarded by own_mu_
  struct Borrow {
    std::string owner;
    bool fetching = false;
    int holders = 0;
  };
  std::unordered_map<std::string, Borrow> borrowed_;  // guarded by own_mu_

  // Worker side state (executor thread).
  struct Executor;
  std::unique_ptr<Executor> exec_;
};

// The process's runtime, or nullptr before init / after shutdown.
CoreWorker* current();

}  // namespace yard::detail
