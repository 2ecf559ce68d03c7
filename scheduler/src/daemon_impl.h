// The daemon's state. One process plays two roles, both driven by its one I/O thread:
//  * node manager (every node): resources in the control store, the worker pool, leases of
//    workers to task submitters, hosting actors the head placed here, jobs' worker processes;
//  * head (the first node): job manager, actor manager (placement, restarts), placement groups,
//    failure detector. It places work on any node through the Redis resource tables and asks
//    that node's manager to host it.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon.h"
#include "io_loop.h"
#include "redis_client.h"
#include "policy/placement.h"
#include "resources.h"
#include "result.h"
#include "store/tables.h"

namespace yard::sched {

using Clock = std::chrono::steady_clock;

// A message's resource list into `out` (amounts added up). The problem when an amount is bad.
inline std::optional<std::string> read_resources(capnp::List<wire::Resource>::Reader list, Res& out) {
  for (auto r : list) {
    if (!(r.getAmount() >= 0) || !std::isfinite(r.getAmount()))
      return "resource " + std::string(r.getName()) + " has a bad amount";
    out[r.getName()] += r.getAmount();
  }
  return std::nullopt;
}

// Writes bytes to `path` through a temporary file and a rename (mode 0755).
Problem write_file_atomic(const std::string& path, const char* data, size_t size);

class Daemon {
 public:
  explicit Daemon(DaemonOptions o) : o_(std::move(o)) {}
  int run();

 private:
  // Start-up and shut-down phases of run().
  struct Takeover {
    std::string redis_address;
    pid_t redis_pid = 0;
  };
  std::optional<Takeover> find_takeover();
  void open_session(bool joining, bool taking_over);
  void measure_resources();
  void start_redis();
  void connect_control_store(bool joining, const std::optional<Takeover>& takeover);
  void begin_serving(bool joining);
  void wait_for_stop();

  using Incoming = detail::IoLoop::Incoming;
  enum class WState { kStarting, kIdle, kLeased, kActor };
  struct Worker {
    std::string id, job_id, address, actor_id, log;
    pid_t pid = 0;
    WState state = WState::kStarting;
    Res held;            // given back to this node's pool when the worker exits
    uint64_t lease = 0;  // lease this starting worker is reserved for
    bool detached = false;
    std::vector<std::pair<int, double>> gpus;  // (device, share) assigned to it
    bool dedicated = false;  // started for one lease (GPUs): it exits when the lease is returned
    std::string bundle;      // held comes from this placement-group bundle, not from the node
  };
  struct Job : store::JobRecord {
    bool ended = false;
    bool remote = false;  // registered at the head; this node only runs its workers
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
  // Node role: an actor the head asked this node to host.
  struct Hosted {
    std::string routing;  // the head's request, answered once the actor is constructed
    uint64_t req = 0;
    bool replied = false;
    std::shared_ptr<detail::InMessage> msg;  // the HostActor request (constructor arguments)
    std::string worker;
  };
  // Head role.
  struct NodeView {
    std::string id, address, hostname;
    Res total, avail;
    bool alive = false;
  };
  struct Actor : store::ActorRecord {
    std::shared_ptr<detail::InMessage> create_msg;  // kept while it may still be (re)started
    std::string creator_routing;
    uint64_t creator_req = 0;
    struct Lookup {
      std::string routing;
      uint64_t req;
      Clock::time_point deadline;  // answered by then whatever the state
    };
    std::vector<Lookup> lookups;  // GetActor by id, answered once up (or moved, or dead)
    bool replied = false;
    policy::ActorStrategy strategy = policy::ActorStrategy::kDefault;
    std::string affinity_node, caller_node;
    bool soft = false, killed = false, placing = false;
    uint64_t epoch = 0;     // placement attempts: a late answer to an old one is ignored
    int place_failures = 0;
    int unreachable = 0;
    double dead_at = 0;
  };
  struct PGroup : store::GroupRecord {
    std::vector<Res> bundle_avail;
    struct Waiter {
      std::string routing;
      uint64_t req;
      Clock::time_point deadline;
    };
    std::vector<Waiter> waiters;
    double created_at = 0;
  };

  // Requests (I/O thread).
  void handle(Incoming in);
  void on_register_job(Incoming& in);
  void on_register_worker(Incoming& in);
  void on_request_lease(Incoming& in);
  void on_return_lease(Incoming& in);
  void on_submit_job(Incoming& in);
  void on_job_logs(Incoming& in);
  void on_stop_job(Incoming& in);
  void on_status(Incoming& in);
  void on_get_control_store(Incoming& in);
  void on_list_jobs(Incoming& in);
  void on_finish_job(Incoming& in);
  void reply_ok(Incoming& in);
  void reply_error(const std::string& routing, uint64_t req, wire::ErrorCode code, const std::string& msg);
  void reply_error(Incoming& in, wire::ErrorCode code, const std::string& msg) {
    reply_error(in.routing_id, in.msg->env().getRequestId(), code, msg);
  }

  // Node role (I/O thread).
  bool take_local(const Res& need);
  void give_local(const Res& need);
  void give_held(Worker& w);  // its resources back to the node or to its bundle
  // For a lease in a placement group: served here from bundle l.bundle (whose totals come with
  // it), at the bundle's node elsewhere, wait (the bundle is not placed yet), or infeasible.
  struct BundleRoute {
    enum class Kind { kWait, kHere, kElsewhere, kInfeasible };
    Kind kind = Kind::kWait;
    std::string address, why;
    Res total;
  };
  BundleRoute bundle_route(Lease& l);
  void refresh_local();
  std::string spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                           uint32_t restarts = 0, const std::vector<std::pair<int, double>>& gpus = {});
  // Devices for `amount` GPUs (whole devices for 1 and more, a share of one for less), or
  // nullopt when the free shares do not allow it. Taken from gpu_free_.
  std::optional<std::vector<std::pair<int, double>>> take_gpus(double amount);
  void give_gpus(const std::vector<std::pair<int, double>>& gpus);
  std::vector<double> gpu_free_;
  // Runs k with the job (its binary fetched from the head when this node lacks it), or with the
  // reason it cannot run here.
  void with_job(const std::string& job_id, std::function<void(Result<Job*>)> k);
  void on_blob(Incoming& in);
  // Fetches a blob from the head into `path` (once per digest), then calls k with what failed.
  void fetch_blob(const std::string& digest, const std::string& path, std::function<void(const Problem&)> k);
  // Unpacks an uploaded working directory (tar.gz blob at `archive`) under this node's session;
  // returns the directory, or "" with *why.
  Result<std::string> unpack_workdir(const std::string& digest, const std::string& archive);
  void process_leases();
  // One lease's turn in the queue; true when it has been answered (it leaves the queue).
  bool serve_lease(Lease& l);
  bool serve_in_bundle(Lease& l);
  // A worker for the lease: an idle one of its job (none for GPU leases), else a new one
  // (l.starting counts it). Throws when the process cannot be started.
  std::string lease_worker(Lease& l, const std::vector<std::pair<int, double>>& devices);
  void answer_spillback(const Lease& l, const std::string& address);
  // A live node's address from the peer view (refreshed when older than 100 ms), or "".
  std::string peer_address(const std::string& node);
  void answer_lease(Lease& l);
  void on_host_actor(Incoming& in);
  void instantiate_hosted(const std::string& actor_id, Worker& w);
  void on_kill_hosted(Incoming& in);
  void report_lost(const std::string& actor_id, const std::string& cause, int attempt = 0);
  void reap();
  // The job has ended with `status` (nullopt: its process is gone, the status stays as it is).
  void end_job(Job& j, std::optional<store::JobStatus> status, int exit_code);
  void check_remote_jobs();
  void save_job(const Job& j);
  void save_node();
  void periodic();
  void shutdown_all();
  std::string new_job_id();

  // Head role (I/O thread).
  void on_create_actor(Incoming& in);
  // A creation sent again (its first answer was lost with a head that restarted) is answered as
  // the same actor; true when `in` was one.
  bool answer_repeated_creation(Incoming& in);
  struct Rejection {
    wire::ErrorCode code;
    std::string why;
  };
  // Why a new actor is refused at once (bad request, unknown group or name in use, nowhere it
  // could ever run), or nullopt.
  std::optional<Rejection> check_new_actor(const Actor& a);
  void on_get_actor(Incoming& in);
  void on_kill_actor(Incoming& in);
  void on_actor_lost(Incoming& in);
  void on_create_pg(Incoming& in);
  void on_wait_pg(Incoming& in);
  void on_remove_pg(Incoming& in);
  void on_drain(Incoming& in);
  void check_drains();
  void refresh_nodes();
  void check_nodes();
  // The nodes that can take work now (alive, not draining); count_actors() adds how many live
  // actors each has, which only SPREAD placement reads.
  policy::ClusterView cluster_view() const;
  void count_actors(policy::ClusterView& view) const;
  policy::Decision pick_node(const Actor& a, const policy::ClusterView& view) const;
  void process_actors();
  void place_actor(Actor& a, const std::string& node);
  void actor_up(Actor& a, const detail::InMessage& info);
  void actor_lost(Actor& a, const std::string& cause, bool count_restart);
  void actor_failed(Actor& a, wire::ErrorCode code, const std::string& cause);
  void free_actor_bundle(Actor& a);
  void kill_actor_process(Actor& a);
  void fill_actor_info(wire::ActorInfo::Builder b, const Actor& a);
  void answer_lookups(Actor& a, bool expired_only = false);
  void save_actor(const Actor& a);
  void save_actor_spec(const Actor& a);
  // Places the group's unplaced bundles and reserves them: placed (the group is CREATED), wait,
  // or (check_feasible: a new group) infeasible with the reason.
  policy::Decision try_place_pg(PGroup& g, bool check_feasible);
  void answer_pg_waiters(PGroup& g);
  void remove_pg(PGroup& g, const std::string& why);
  void save_pg(const PGroup& g);
  void publish(const std::string& event_json);
  void prune_dead_actors();
  void flush_releases();
  Problem reserve_now(const std::vector<std::pair<std::string, Res>>& items,
                          const std::vector<std::string>& then_hset = {});

  DaemonOptions o_;
  bool head_ = true;
  std::string token_, token_file_, log_dir_, node_id_;
  std::unique_ptr<detail::Redis> redis_;
  std::unique_ptr<store::Tables> tables_;  // the records in redis_
  std::string redis_password_;
  pid_t redis_pid_ = 0;
  bool redis_owned_ = true;  // spawned by this process (else: taken over from a killed head)
  bool recovered_ = false;
  std::atomic<bool> serving_{false};
  void rebuild();
  std::unique_ptr<detail::IoLoop> io_;
  Res total_, avail_;  // avail_: this node's view of its own Redis hash
  std::map<std::string, Worker> workers_;
  std::map<pid_t, std::string> worker_by_pid_;
  std::map<std::string, Job> jobs_;
  std::deque<Lease> leases_;
  uint64_t lease_seq_ = 0;
  std::map<std::string, Hosted> hosted_;
  pid_t parent_pid_ = 0;
  double start_time_ = 0;
  Clock::time_point next_job_check_{};
  Clock::time_point next_prune_{};
  std::map<std::string, std::vector<std::function<void(const Problem&)>>> fetching_;  // digest -> waiters
  // The other alive nodes as the policies see them, and where each listens; rebuilt by
  // refresh_peers_view() (with every heartbeat, and when older than 100 ms where it is needed).
  policy::ClusterView peers_;
  std::map<std::string, std::string> peer_addresses_;
  Clock::time_point peers_view_at_{};
  void refresh_peers_if_stale();
  size_t spread_turn_ = 0;
  // A node with room for `need` now (most free CPUs first), or when `ever`, one whose totals hold it.
  std::string spill_target(const Res& need, bool ever = false);
  void refresh_peers_view();
  bool fenced_ = false;

  // Head.
  std::map<std::string, NodeView> nodes_;
  std::set<std::string> dead_nodes_;
  uint64_t seen_reconnects_ = 0;
  Clock::time_point grace_until_{};
  std::map<std::string, Actor> actors_;
  std::deque<std::string> pending_actors_;
  std::map<std::string, std::string> actor_names_;
  std::map<std::string, PGroup> pgs_;
  // Resources of removed groups, given back in the same round trip as the next reservation (or
  // within a few milliseconds): removal costs the head no Redis round trip of its own.
  std::vector<std::pair<std::string, Res>> pending_release_;
  std::vector<std::string> pending_del_;
  bool flush_scheduled_ = false;
  struct Drain {
    std::string node, routing;
    uint64_t req;
    Clock::time_point deadline;
    bool force;
  };
  std::vector<Drain> drains_;
  std::set<std::string> draining_;  // no new placements there
};

}  // namespace yard::sched
