// CoreWorker: what every Switchyard process that runs user code has — a driver or a worker.
//
// It owns the process's IoLoop and MemoryStore, and:
//  * the task submitter (leases workers from the node manager, pipelines tasks to them
//    directly, retries a task whose worker crashed, fails it with WorkerCrashed after that);
//  * the actor submitter (creates actors through the head, then sends calls straight to the
//    actor's worker, in order; a lost connection means ActorDied or ActorRestarting);
//  * ownership and borrowing of objects (ownership.h) and the argument resolver shared by both
//    submitters (arguments.h);
//  * in a worker process, the task executor (task_executor.h).
// Submitter state lives on the I/O thread only: user threads post work to it, no locks.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actor_submitter.h"
#include "arguments.h"
#include "io_loop.h"
#include "memory_store.h"
#include "ownership.h"
#include "task_executor.h"
#include "task_spec.h"
#include "yard/yard.h"

namespace yard::detail {

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

  // I/O thread only: tasks.
  void pump_tasks();
  void send_task(const std::shared_ptr<TaskSpec>& spec, Lease& w);
  void request_lease(const std::string& shape, const std::string& node = {}, bool spilled = false);
  void return_idle_leases();
  bool worker_mode_ = false;
  std::string token_;
  std::string head_;   // where leases go: the node manager the head named (driver), its own (worker)
  std::string gcs_;    // where actor and placement-group requests go: the cluster's head
  std::string node_id_;
  std::string job_id_;
  WorkerConfig wcfg_;
  std::string id_prefix_;
  std::atomic<uint64_t> id_seq_{0};
  MemoryStore store_;
  std::unique_ptr<IoLoop> io_;
  Ownership ownership_{store_, io_, token_};
  ArgumentResolver args_{store_, io_, ownership_};
  ActorSubmitter actors_{store_, io_, args_, [this](std::string fn, std::vector<Arg> args) {
                           return make_spec(std::move(fn), std::move(args));
                         },
                         token_, gcs_, job_id_, node_id_};

  // I/O thread only.
  std::map<std::string, Shape> shapes_;
  std::vector<Lease> leases_;

  std::chrono::steady_clock::time_point last_task_activity_{};

  // Worker side: runs what is pushed to this worker (task_executor.h).
  std::unique_ptr<TaskExecutor> executor_;
};

// The process's runtime, or nullptr before init / after shutdown.
CoreWorker* current();

}  // namespace yard::detail
