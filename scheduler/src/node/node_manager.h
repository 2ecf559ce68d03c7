// The node manager: one per node (the head's machine has one too, beside the head service). It
// offers the node's resources in the control store and owns what runs on the node:
//  * the worker pool and the lease queue (workers leased to task submitters, spillback);
//  * local resources and GPU devices;
//  * actors the head placed here (hosting: a dedicated worker constructs each);
//  * jobs' processes (`yard submit` runs the job's program on the head's node), their logs, and
//    the blob cache (job binaries and working directories fetched from the head by digest).
// Everything runs on its one I/O thread.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/service.h"
#include "daemon.h"
#include "node/blob_cache.h"
#include "node_memory.h"
#include "node/peers.h"
#include "node/worker_pool.h"
#include "policy/gpus.h"
#include "policy/placement.h"
#include "yard/redis.h"
#include "resources.h"
#include "store/tables.h"

namespace yard::sched {

class NodeManager {
 public:
  explicit NodeManager(DaemonOptions o) : o_(std::move(o)) {}
  int run();

 private:
  using WState = WorkerPool::State;
  using Worker = WorkerPool::Worker;
  using Devices = WorkerPool::Devices;
  struct Job : store::JobRecord {
    bool ended = false;
    bool runs_here = false;  // its program is this node's child (`yard submit`)
    int startup_failures = 0;
  };
  struct Lease {
    uint64_t seq;
    std::string routing;
    uint64_t req;
    std::string job;
    uint32_t count;
    Clock::time_point deadline;
    std::vector<std::string> assigned;
    int starting = 0;
    bool spilled = false;
    bool no_wait = false;
    Res need{{"CPU", 1.0}};  // per worker
    std::string node_id;      // affinity
    bool soft = false, spread = false;
    std::string pg;           // placement group: served from a bundle's resources
    int bundle = -1;
  };
  // An actor the head asked this node to host.
  struct Hosted {
    std::string routing;  // the head's request, answered once the actor is constructed
    uint64_t req = 0;
    bool replied = false;
    std::shared_ptr<detail::InMessage> msg;  // the HostActor request (constructor arguments)
    std::string worker;
  };

  // Start-up (node_manager.cc).
  void open_session();
  void measure_resources();
  void join();
  void begin_serving();
  void save_node();
  void shutdown_all();
  void handle(Incoming in);
  void periodic();
  void reap();
  void worker_exited(const Worker& w, int status);

  // Leases (leases.cc).
  void on_request_lease(Incoming& in);
  void on_return_lease(Incoming& in);
  void process_leases();
  // One lease's turn in the queue; true when it has been answered (it leaves the queue).
  bool serve_lease(Lease& l);
  bool serve_in_bundle(Lease& l);
  // A worker for the lease: an idle one of its job (none for GPU leases), else a new one
  // (l.starting counts it). Throws when the process cannot be started.
  std::string lease_worker(Lease& l, const Devices& devices);
  void answer_lease(Lease& l);
  void answer_spillback(const Lease& l, const std::string& address);
  // For a lease in a placement group: served here from bundle l.bundle (whose totals come with
  // it), at the bundle's node elsewhere, wait (the bundle is not placed yet), or infeasible.
  struct BundleRoute {
    enum class Kind { kWait, kHere, kElsewhere, kInfeasible };
    Kind kind = Kind::kWait;
    std::string address, why;
    Res total;
  };
  BundleRoute bundle_route(Lease& l);
  bool take_local(const Res& need);
  void give_local(const Res& need);
  void give_held(const Worker& w);  // its resources back to the node or to its bundle
  void refresh_local();

  // Workers (workers.cc).
  std::string spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                           uint32_t restarts = 0, const Devices& gpus = {});
  void on_register_worker(Incoming& in);
  void on_warm_pool(Incoming& in);

  // Hosting actors (hosting.cc).
  void on_host_actor(Incoming& in);
  void instantiate_hosted(const std::string& actor_id, Worker& w);
  void on_kill_hosted(Incoming& in);
  // Tells the head an actor's process here is gone; the head decides whether it restarts.
  void report_lost(const std::string& actor_id, const std::string& cause);
  // Sends the head a request `fill` writes, again every 500 ms for about a minute while the head
  // is unreachable or restarting; `what` names it in the log when it never arrives.
  void tell_head(std::function<void(wire::Envelope::Builder)> fill, std::string what, int attempt = 0);

  // Jobs (jobs.cc).
  void on_submit_job(Incoming& in);
  void on_stop_job(Incoming& in);
  void on_job_ended(Incoming& in);
  // The job's workers here stop and its leases are refused; `status` set: it has ended with it.
  void end_job(Job& j, std::optional<store::JobStatus> status, int exit_code);
  // A job run here ended: the head hears of it (retried while the head is away).
  void tell_head_job_ended(const std::string& job_id);
  void check_remote_jobs();
  void save_job(const Job& j);
  // Runs k with the job (its binary fetched from the head when this node lacks it), or with the
  // reason it cannot run here.
  void with_job(const std::string& job_id, std::function<void(Result<Job*>)> k);

  DaemonOptions o_;
  std::string token_, token_file_, log_dir_, node_id_;
  std::unique_ptr<detail::IoLoop> io_;
  Replies reply_{io_, token_};
  std::unique_ptr<detail::Redis> redis_;
  std::unique_ptr<store::Tables> tables_;
  std::string redis_password_;
  pid_t parent_pid_ = 0;
  double start_time_ = 0;
  bool fenced_ = false;  // declared dead while silent: its work was stopped, it rejoins empty

  Res total_, avail_;  // avail_: this node's view of its own Redis hash
  policy::GpuPool gpus_;
  WorkerPool workers_;
  std::map<std::string, Job> jobs_;
  std::deque<Lease> leases_;
  uint64_t lease_seq_ = 0;
  std::map<std::string, Hosted> hosted_;
  Clock::time_point next_job_check_{};
  BlobCache blobs_{io_, token_, o_.join_address, o_.session_dir, log_dir_};
  // The node's object memory: its limit, what its processes hold, the spill directory.
  std::unique_ptr<detail::NodeMemory> memory_;
  std::string spill_dir_;
  void open_object_memory();
  void sweep_object_memory();
  Peers peers_{tables_};  // the other nodes, for routing leases
  size_t spread_turn_ = 0;
};

}  // namespace yard::sched
