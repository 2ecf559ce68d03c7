// The node's worker processes: each runs a job's binary (YARD_WORKER=1) as a task worker (idle or
// leased), or dedicated to one actor or one GPU lease; what it holds (resources, a bundle's
// resources, GPU devices) comes back when it exits. Pure bookkeeping plus starting and stopping
// processes; the node manager decides what each is for.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/local_resources.h"
#include "policy/gpus.h"
#include "policy/res.h"

namespace yard::sched {

class WorkerPool {
 public:
  enum class State { kStarting, kIdle, kLeased, kActor };
  using Devices = policy::GpuPool::Devices;
  struct Worker {
    std::string id, job_id, address, actor_id, log;
    pid_t pid = 0;
    State state = State::kStarting;
    Res held;            // given back to this node's pool when the worker exits
    uint64_t lease = 0;  // lease this starting worker is reserved for
    bool detached = false;
    Devices gpus;            // assigned to it
    bool dedicated = false;  // started for one lease (GPUs): it exits when the lease is returned
    BundleRef bundle;        // held comes from this placement-group bundle, not from the node
    std::string lessee;      // leased to this worker of the node ("" : a driver, or a process elsewhere)
    std::string runtime_env;  // what it was started with beyond its job's (JSON; "": the job's)
  };
  struct Launch {
    std::string job_id, binary, cwd, name_space, actor_id;
    // The job's variables (yard submit --env) and an actor's (its runtime_env) over the node's;
    // Switchyard's own (YARD_*) are not overridden.
    std::map<std::string, std::string> env;
    uint64_t lease = 0;
    uint32_t restarts = 0;
    Devices gpus;
    std::string runtime_env;  // as given (JSON): the worker is leased only for the same
  };

  // What every worker's environment says about this node (its address, token, id, the head),
  // where their logs go, and whether the node has GPUs (then a worker sees only its own).
  void configure(std::map<std::string, std::string> env, std::string log_dir, bool node_has_gpus);
  // One variable of the workers' environment, for those started from now on.
  void set_env(const std::string& name, const std::string& value) { env_[name] = value; }
  // Starts a worker; its id. Throws yard::Error when the process cannot be started.
  std::string start(const Launch& l);

  Worker* find(const std::string& id);
  // Every worker of the pool, in turn.
  void each(const std::function<void(Worker&)>& f) {
    for (auto& [id, w] : workers_) f(w);
  }
  Worker& at(const std::string& id) { return workers_.at(id); }
  // An idle task worker of the job, or nullptr.
  Worker* idle_of(const std::string& job, const std::string& runtime_env = {});
  // Task workers of the job (idle, leased or starting).
  int task_workers_of(const std::string& job) const;
  long leased() const;
  // What the task workers leased (or starting for a lease) hold outside placement groups, by job.
  std::map<std::string, Res> leased_by_job() const;
  // Workers by state ("starting", "idle", "leased", "actor") and the pids of all of them.
  std::map<std::string, int> by_state() const;
  std::vector<pid_t> pids() const;
  size_t size() const { return workers_.size(); }
  bool empty() const { return workers_.empty(); }

  // The worker that was this process, now gone from the pool; nullopt when pid was none of ours.
  std::optional<Worker> exited(pid_t pid);
  // Asks a worker to stop: SIGTERM (it sends its last metrics and timeline spans, then exits);
  // SIGKILL from enforce_stops when it is still there a second later.
  void stop(const std::string& id);
  // The job's workers, detached actors' excepted (stopped as above).
  void stop_job(const std::string& job);
  void stop_all();
  void enforce_stops(std::chrono::steady_clock::time_point now);
  // At once (SIGKILL): a fenced node's stale workers.
  void kill_all();
  bool any_alive() const;
  // The shared-memory segments of every worker (after they are gone).
  void remove_segments() const;
  static void remove_segments(pid_t pid);

 private:
  std::map<std::string, std::string> env_;
  std::string log_dir_;
  bool gpus_ = false;
  std::map<std::string, Worker> workers_;
  std::map<pid_t, std::string> by_pid_;
  std::map<pid_t, std::chrono::steady_clock::time_point> stopping_;  // SIGKILL at that time
  void stop_pid(pid_t pid);
};

}  // namespace yard::sched
