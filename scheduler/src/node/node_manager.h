// The node manager: one per node (the head's machine has one too, beside the head service). It
// joins the cluster, keeps the node's record and heartbeat, answers requests on the wire, and
// wires together the parts that own what runs on the node, each in its own file:
//  * LocalResources: the node's resources (in the control store's ledger) and GPU devices;
//  * LeaseDesk: requests for workers and their answers, over the LeaseQueue (routing, spillback);
//  * WorkerPool: the worker processes;
//  * ActorHosting: actors the head placed here (a dedicated worker constructs each);
//  * JobRunner: jobs known here, and programs `yard submit` runs on the head's node;
//  * BlobCache: job binaries and working directories fetched from the head by digest;
//  * Peers: the other nodes, for routing.
// Everything runs on its one I/O thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/repeated_log.h"
#include "common/service.h"
#include "daemon.h"
#include "node/actor_hosting.h"
#include "node/blob_cache.h"
#include "node/job_runner.h"
#include "node/lease_desk.h"
#include "node/node_metrics.h"
#include "node/local_resources.h"
#include "yard/internal/node_objects.h"
#include "node/peers.h"
#include "node/worker_pool.h"
#include "policy/gpus.h"
#include "policy/placement.h"
#include "yard/internal/redis.h"
#include "resources.h"
#include "store/tables.h"

namespace yard::sched {

class NodeManager : private ActorHosting::Node {
 public:
  explicit NodeManager(NodeOptions o) : o_(std::move(o)) {}
  int run();

 private:
  using WState = WorkerPool::State;
  using Worker = WorkerPool::Worker;
  using Devices = WorkerPool::Devices;
  using Job = JobRunner::Job;
  // Start-up (node_manager.cc).
  void open_session();
  void measure_resources();
  void join();
  void begin_serving();
  void save_node();
  void note_late_beat();
  // Heartbeats go every quarter of the timeout, at most ten a second.
  std::chrono::milliseconds beat_period() const {
    return std::chrono::milliseconds(std::max<long>(100, static_cast<long>(o_.heartbeat_timeout_s * 250)));
  }
  void shutdown_all();
  void handle(Incoming in);
  void periodic();
  void reap();
  void worker_exited(const Worker& w, int status);

  // Workers (workers.cc).
  // `runtime_env`: an actor's own (yard/runtime_env.h's JSON, "" : none), over its job's.
  std::string spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                           uint32_t restarts = 0, const Devices& gpus = {}, const std::string& runtime_env = {});
  void on_register_worker(Incoming& in);
  void on_warm_pool(Incoming& in);

  // Hosting actors (hosting.cc): what ActorHosting asks of the node, and the head told.
  std::string spawn_actor_worker(const std::string& job_id, const std::string& actor_id, uint32_t restarts,
                                 const Devices& devices, const std::string& runtime_env) override {
    return spawn_worker(job_id, actor_id, 0, restarts, devices, runtime_env);
  }
  void actor_lost(const std::string& actor_id, const std::string& cause) override;
  // Sends the head a request `fill` writes, again every 500 ms for about a minute while the head
  // is unreachable or restarting; `what` names it in the log when it never arrives.
  // Sends the head a request, again while it is unavailable (restarting) for about a minute;
  // `done` (optional) runs once it has been answered or given up on.
  void tell_head(std::function<void(wire::Envelope::Builder)> fill, std::string what, int attempt = 0,
                 std::function<void()> done = {});
  // The active head as the control store names it (with every heartbeat): a new one's address is
  // where the node's requests go from now on, and its epoch the oldest the node obeys.
  void follow_head();
  // Whether a request may be acted on: one from a head (it carries an epoch) older than the
  // newest known is refused (true: refused, and answered).
  bool from_stale_head(const Incoming& in);
  uint64_t head_epoch_ = 0;

  // Jobs (jobs.cc): requests for the job runner, and the head told when a job run here ends.
  void on_submit_job(Incoming& in);
  void on_stop_job(Incoming& in);
  void on_job_ended(Incoming& in);
  void tell_head_job_ended(const std::string& job_id);
  void with_job(const std::string& job_id, std::function<void(Result<Job*>)> k) override {
    jobs_->with_job(job_id, std::move(k));
  }

  NodeOptions o_;
  std::string redis_address_;  // the control store's, as the head said at join
  std::string token_, token_file_, log_dir_, node_id_;
  detail::Channel io_;  // opened by start()
  Replies reply_{io_, token_};
  std::unique_ptr<detail::Redis> redis_;
  std::unique_ptr<store::Tables> tables_;
  std::string redis_password_;
  pid_t parent_pid_ = 0;
  double start_time_ = 0;

  // This node's resources (kept in the control store's ledger) and the lease queue over them.
  Res measured_;
  int gpu_devices_ = 0;
  std::unique_ptr<ResourceLedger> ledger_;
  std::unique_ptr<LocalResources> res_;
  std::unique_ptr<LeaseDesk> leases_;
  WorkerPool workers_;
  std::unique_ptr<JobRunner> jobs_;
  std::unique_ptr<ActorHosting> hosting_;
  Clock::time_point next_job_check_{};
  Clock::time_point last_contact_{};  // the control store last took the node's record
  Clock::time_point last_beat_{};  // the last heartbeat's start, to see one that ran late
  RepeatedLog record_errors_;
  bool gave_up_ = false;  // stopping: the control store was out of reach past --head-timeout
  BlobCache blobs_{io_, token_, o_.join_address, o_.session_dir, log_dir_};
  // The node's object memory: its limit, what its processes hold, the spill directory.
  std::unique_ptr<detail::NodeMemory> memory_;
  std::string spill_dir_;
  void open_object_memory();
  void sweep_object_memory();
  Peers peers_{tables_};  // the other nodes, for routing leases
  std::unique_ptr<NodeMetrics> metrics_;  // with --metrics-port
  WebIdentity web_;                       // the cluster's, beyond loopback: metrics over HTTPS
  void update_metrics(const store::NodeReport& r);
  // A process's metrics (served with the node's) and task spans (to its job's timeline).
  void on_report_metrics(Incoming& in);
  // Spans of the node's own (lease waits) by job, appended to the timelines every 50 ms.
  struct LeaseSpan {
    int64_t start_us, dur_us;
    size_t workers;
  };
  std::map<std::string, std::vector<LeaseSpan>> lease_spans_;
  void lease_span(const std::string& job, double wait_s, size_t workers);
  void flush_lease_spans();
  void record_curves(const std::string& job, wire::MetricsReport::Reader r);
  std::map<std::string, std::map<std::string, double>> curve_values_;  // job -> series -> last point
};

}  // namespace yard::sched
