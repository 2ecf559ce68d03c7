// The head service: the cluster's control plane, a process of its own beside the head node's
// node manager (which it starts, and stops with itself). Killing it leaves every node, and every
// actor on them, running; a head started again at the same address takes the cluster over from
// the control store.
// Its parts, each owning its state behind a narrow interface:
//  * JobTable (job_table.h): the jobs;
//  * JobRequests (job_requests.h): the jobs' requests (registration, `yard submit`, stops, logs,
//    the queue's controls) and what happens when a job ends;
//  * BlobStore (blob_store.h): job binaries and working directories by digest;
//  * ClusterNodes (cluster_nodes.h): the nodes as the head sees them and its reservations;
//  * ActorManager (actors.h): placement across nodes, restarts, lookups, names;
//  * GroupManager (groups.h): placement groups;
//  * JobQueue (job_queue.h): jobs with a shape wait there until they are admitted;
//  * NodeWatch (node_watch.h): the failure detector and drains;
// and the service itself: start-up and takeover, status, events, the control store's address.
// One I/O thread.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autoscale/autoscaler.h"
#include "common/service.h"
#include "daemon.h"
#include "head/actors.h"
#include "head/blob_store.h"
#include "head/cluster_nodes.h"
#include "head/groups.h"
#include "head/dashboard.h"
#include "head/head_lease.h"
#include "head/head_metrics.h"
#include "head/status_builder.h"
#include "head/job_queue.h"
#include "head/job_requests.h"
#include "head/job_table.h"
#include "head/node_watch.h"
#include "head/store_servers.h"
#include "policy/liveness.h"
#include "policy/placement.h"
#include "resources.h"
#include "store/tables.h"
#include "yard/internal/redis.h"

namespace yard::sched {

class HeadService {
 public:
  explicit HeadService(HeadOptions o) : o_(std::move(o)) {}
  int run();

 private:
  using Job = JobTable::Job;
  struct Takeover {
    std::string redis_address;
    pid_t redis_pid = 0;
    std::string redis_password;
    std::string redis_tls_cert;  // PEM ("" : plain)
    // Where the store's servers were recorded (redis.pids), when on this machine: they are
    // adopted and watched ("" : none here).
    std::string servers_session_dir;
  };

  // Start-up and shut-down (head_service.cc).
  void open_session(bool taking_over);
  void start_redis();
  void connect_control_store(const std::optional<Takeover>& takeover);
  void begin_serving();
  // This machine's node manager: the one a killed head left when it still runs, else a new one.
  void start_head_node();
  void stop_head_node();
  void stop_nodes(std::function<void()> then);
  void ask_to_stop(const std::string& address, std::function<void()> answered = {});
  static constexpr std::chrono::seconds kStopAnswers{5};  // how long stop_nodes waits for answers
  void on_loop(std::function<void()> f);
  void handle(Incoming in);
  void handle_head_request(Incoming& in);
  void periodic();
  void sweep_blobs();  // every 10 minutes: BlobStore::sweep
  // The turn's actor records, in one round trip to Redis, before the turn's answers leave.
  void write_records();
  static constexpr std::chrono::milliseconds kReplicaWait{1000};
  void reap();
  void on_get_control_store(Incoming& in);
  void on_status(Incoming& in);
  void on_status_summary(Incoming& in);
  nlohmann::json cluster_json();
  // What waits for a node that can hold it (actors, placement groups, tasks at each node), why,
  // and since when: `yard status` and the dashboard.
  nlohmann::json waiting_json();
  void publish(const std::string& event_json) const;

  // The autoscaler, with --autoscaler (autoscaling.cc).
  void start_autoscaler();

  // Taking over from a killed head (rebuild.cc): the cluster it left at this address (nullopt:
  // none, or its control store is gone too), and its state read back.
  std::optional<Takeover> find_takeover();
  void rebuild();

  // The lease (standby.cc). A standby waits until the active head's lease is free and takes it
  // (nullopt: stopped first); every head holds the lease while it serves, and steps down (stops,
  // touching nothing) when another has taken it.
  std::optional<Takeover> wait_as_standby();
  void take_lease(bool taking_over);
  void renew_lease();
  void step_down();
  void on_where_is_head(Incoming& in);
  // What a request to a head that does not serve hears.
  std::string not_serving_why() const;
  std::unique_ptr<HeadLease> lease_;
  std::atomic<bool> stepped_down_{false};
  std::atomic<bool> lease_held_{false};  // taken (by a standby: it is becoming the active head)
  mutable std::mutex role_mu_;
  std::string active_elsewhere_;  // a standby's or stepped-down head's: the active head's address
  bool lease_unreachable_logged_ = false;

  HeadOptions o_;
  std::string token_, token_file_, log_dir_;
  std::string team_key_;  // what team credentials are derived from (common/credentials.h)
  detail::Channel io_;  // opened by start()
  Replies reply_{io_, token_};
  std::unique_ptr<detail::Redis> redis_;
  std::unique_ptr<store::Tables> tables_;  // the records in redis_
  std::string redis_password_;
  std::string redis_tls_cert_;  // PEM, when Redis speaks TLS (a cluster beyond loopback)
  WebIdentity web_;                              // HTTPS for metrics and the dashboard (beyond loopback)
  std::pair<std::string, std::string> web_pem_;  // its key and certificate, for the node managers
  std::unique_ptr<StoreServers> servers_;  // the Redis servers this head started (none: taken over or given)
  bool recovered_ = false;
  std::atomic<bool> serving_{false};
  pid_t parent_pid_ = 0;
  double start_time_ = 0;

  // The head's node: its manager's id, pid (a child of this process, or one a killed head left)
  // and whether this process started it.
  std::string head_node_;
  pid_t head_node_pid_ = 0;
  bool head_node_child_ = false;

  std::unique_ptr<JobTable> jobs_;  // over tables_
  std::unique_ptr<ClusterNodes> nodes_;  // over tables_
  Clock::time_point records_retry_at_{};  // after a failed write_records, its next try
  std::unique_ptr<ActorManager> actors_;  // over nodes_, groups_ and jobs_
  std::unique_ptr<GroupManager> groups_;  // over nodes_ and jobs_
  std::unique_ptr<JobQueue> queue_;       // over nodes_
  std::unique_ptr<JobRequests> job_requests_;  // over all of the above
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<NodeWatch> watch_;          // over all of the above
  std::optional<AutoscaleConfig> autoscale_config_;
  // Requests no node can hold wait for one (the cluster's [scheduling] infeasible is not "fail").
  bool infeasible_waits() const { return !(autoscale_config_ && autoscale_config_->infeasible_fails); }
  std::unique_ptr<Autoscaler> autoscaler_;  // with --autoscaler
  std::unique_ptr<HeadMetrics> metrics_;  // with --metrics-port
  std::unique_ptr<StatusBuilder> status_builder_;  // made by the first full status; after io_: goes first
  std::unique_ptr<Dashboard> dashboard_;  // unless --dashboard-port -1
  void update_metrics();
};

}  // namespace yard::sched
