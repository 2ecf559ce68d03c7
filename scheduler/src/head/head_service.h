// The head service: the cluster's control plane, a process of its own beside the head node's
// node manager (which it starts, and stops with itself). Killing it leaves every node, and every
// actor on them, running; a head started again at the same address takes the cluster over from
// the control store.
//  * jobs: registration, the job table, `yard submit` (run by the head node's manager), logs;
//  * the actor manager: placement across nodes, restarts, lookups, names;
//  * placement groups;
//  * the failure detector and drains;
//  * status, events, blobs (job binaries, working directories), the control store's address.
// Every placement reads the nodes' resources from the control store and takes them with an
// atomic script there; the chosen node's manager then hosts the actor. One I/O thread.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/service.h"
#include "daemon.h"
#include "head/cluster_nodes.h"
#include "head/groups.h"
#include "head/job_table.h"
#include "policy/placement.h"
#include "yard/redis.h"
#include "resources.h"
#include "store/tables.h"

namespace yard::sched {

class HeadService {
 public:
  explicit HeadService(DaemonOptions o) : o_(std::move(o)) {}
  int run();

 private:
  using Job = JobTable::Job;
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
  struct Takeover {
    std::string redis_address;
    pid_t redis_pid = 0;
  };

  // Start-up and shut-down (head_service.cc).
  std::optional<Takeover> find_takeover();
  void open_session(bool taking_over);
  void start_redis();
  void connect_control_store(const std::optional<Takeover>& takeover);
  void begin_serving();
  // This machine's node manager: the one a killed head left when it still runs, else a new one.
  void start_head_node();
  void stop_head_node();
  void on_loop(std::function<void()> f);
  void handle(Incoming in);
  void handle_head_request(Incoming& in);
  void periodic();
  void reap();
  void on_get_control_store(Incoming& in);
  void on_status(Incoming& in);
  void publish(const std::string& event_json);

  // Jobs and blobs (jobs.cc).
  void on_register_job(Incoming& in);
  void on_finish_job(Incoming& in);
  void on_submit_job(Incoming& in);
  void on_job_logs(Incoming& in);
  void on_stop_job(Incoming& in);
  void on_list_jobs(Incoming& in);
  void on_blob(Incoming& in);
  // The job ended (`status`), or its driver did (nullopt: the program `yard submit` started
  // still runs, and its node says when it ends): its actors and groups go, its nodes are told.
  void end_job(Job& j, std::optional<store::JobStatus> status);
  // Sends a request to a node manager; the answer goes to `in`'s sender.
  // `then` sees the answer first.
  void forward(Incoming& in, const std::string& address, detail::Frames request, uint64_t rid,
               std::function<void(const detail::InMessage&)> then = {});
  // Tells a node manager something that needs no answer.
  void notify(const std::string& address, detail::Frames request, uint64_t rid);
  // The node whose manager serves a driver's leases: the head's node, else any live node.
  std::pair<std::string, std::string> driver_node();

  // Taking over from a killed head (rebuild.cc).
  void rebuild();
  void rebuild_actors();
  void save_actor_spec(const Actor& a);

  // Nodes: the failure detector and drains (nodes.cc).
  void check_nodes();
  void node_died(const std::string& id);
  void on_drain(Incoming& in);
  void move_off(const std::string& node);
  void check_drains();
  // Adds to a view of the nodes how many live actors each has (only SPREAD placement reads it).
  void count_actors(policy::ClusterView& view) const;

  // Actors (actors.cc).
  void on_create_actor(Incoming& in);
  // A creation sent again (its first answer was lost with a head that restarted) is answered as
  // the same actor; true when `in` was one.
  bool answer_repeated_creation(Incoming& in);
  // Why a new actor is refused at once (bad request, unknown group or name in use, nowhere it
  // could ever run), or nullopt.
  std::optional<Rejection> check_new_actor(const Actor& a);
  void on_get_actor(Incoming& in);
  void on_kill_actor(Incoming& in);
  void on_actor_lost(Incoming& in);
  policy::Decision pick_node(const Actor& a, const policy::ClusterView& view) const;
  void process_actors();
  void place_actor(Actor& a, const std::string& node);
  void on_placed(const std::string& aid, const std::string& node, uint64_t epoch,
                 std::unique_ptr<detail::InMessage> r, std::optional<detail::LocalError> err);
  void actor_up(Actor& a, const detail::InMessage& info);
  void actor_lost(Actor& a, const std::string& cause, bool count_restart);
  void actor_failed(Actor& a, wire::ErrorCode code, const std::string& cause);
  // Its placement group was removed: the actors in it die.
  void group_removed(const std::string& group, const std::string& why);
  void free_actor_bundle(Actor& a);
  void kill_actor_process(Actor& a);
  void fill_actor_info(wire::ActorInfo::Builder b, const Actor& a);
  void answer_lookups(Actor& a, bool expired_only = false);
  void save_actor(const Actor& a);
  void prune_dead_actors();

  DaemonOptions o_;
  std::string token_, token_file_, log_dir_;
  std::unique_ptr<detail::IoLoop> io_;
  Replies reply_{io_, token_};
  std::unique_ptr<detail::Redis> redis_;
  std::unique_ptr<store::Tables> tables_;  // the records in redis_
  std::string redis_password_;
  pid_t redis_pid_ = 0;
  bool redis_owned_ = true;  // spawned by this process (else: taken over from a killed head)
  bool recovered_ = false;
  std::atomic<bool> serving_{false};
  pid_t parent_pid_ = 0;
  double start_time_ = 0;
  Clock::time_point next_prune_{};

  // The head's node: its manager's id, pid (a child of this process, or one a killed head left)
  // and whether this process started it.
  std::string head_node_;
  pid_t head_node_pid_ = 0;
  bool head_node_child_ = false;

  std::unique_ptr<JobTable> jobs_;  // over tables_
  std::unique_ptr<ClusterNodes> nodes_;  // over tables_
  uint64_t seen_reconnects_ = 0;
  Clock::time_point grace_until_{};
  std::map<std::string, Actor> actors_;
  std::deque<std::string> pending_actors_;
  std::map<std::string, std::string> actor_names_;
  std::unique_ptr<GroupManager> groups_;  // over nodes_ and jobs_
  struct Drain {
    std::string node, routing;
    uint64_t req;
    Clock::time_point deadline;
    bool force;
  };
  std::vector<Drain> drains_;
};

}  // namespace yard::sched
