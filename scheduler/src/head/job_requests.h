// The jobs' requests at the head: a driver registers its job and says when it is done; `yard
// submit` runs a program on a node (at once, or through the job queue when it has a shape); `yard
// stop-job`, `yard job cancel|hold|release|priority`, `yard jobs` and `yard logs`. A program
// started with `yard submit` runs on a node whose manager owns its process; the head relays.
// It owns what happens when a job ends (its actors and placement groups go, its nodes are told)
// and when a preempted job's program exits (it waits in the queue again).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/service.h"
#include "head/actors.h"
#include "head/cluster_nodes.h"
#include "head/groups.h"
#include "head/job_queue.h"
#include "head/job_table.h"
#include "store/tables.h"

namespace yard::sched {

// What `yard submit` asked to run (argv, env, cwd, working_dir, max_retries), as kept with the job.
nlohmann::json submission_of(wire::SubmitJob::Reader sj);
// What a submission's program asks of the node it runs on (`yard submit --entrypoint-resources`).
Res entrypoint_resources(const nlohmann::json& submission);
// Why no node can run a program that asks for `needs`.
std::string no_driver_node(const Res& needs);

class JobRequests {
 public:
  using Job = JobTable::Job;
  struct Context : HeadWiring {
    JobTable& jobs;
    JobQueue& queue;
    ActorManager& actors;
    GroupManager& groups;
    std::string team_key;                             // team credentials are checked against it
    std::function<void(const std::string&)> publish;  // an event on yard:events
  };
  explicit JobRequests(Context c)
      : io_(c.io), token_(c.token), reply_(c.reply), tables_(&c.tables), nodes_(&c.nodes), jobs_(&c.jobs),
        queue_(&c.queue), actors_(&c.actors), groups_(&c.groups), head_node_(c.head_node), team_key_(std::move(c.team_key)),
        publish(std::move(c.publish)) {}

  void on_register_job(Incoming& in);
  void on_finish_job(Incoming& in);
  void on_restart_job(Incoming& in);
  void on_submit_job(Incoming& in);
  void on_job_logs(Incoming& in);
  void on_stop_job(Incoming& in, const std::string& id);
  void on_list_jobs(Incoming& in);
  // A job's timeline (Chrome's trace format) and the points of its own gauges (job_views.cc).
  void on_timeline(Incoming& in);
  void on_job_curves(Incoming& in);
  // `yard job cancel|hold|release|priority` (queue_requests.cc).
  void on_job_control(Incoming& in);
  // The job queue's hooks: an admitted job's program started on the driver node; a job's program
  // gets SIGTERM from its node (the queue's stop deadline passed).
  void start_queued(const store::JobRecord& j, const nlohmann::json& submission);
  // A node was declared dead: the programs of submitted jobs that ran there run again on another
  // node while their `--max-retries` last (the run's attempt number tells it to resume); past
  // them, the job fails, saying why in its log (job_recovery.cc).
  void node_lost(const std::string& node);
  void stop_program(const std::string& id);
  // The job ended (`status`), or its driver did (nullopt: the program `yard submit` started
  // still runs, and its node says when it ends): its actors and groups go, its nodes are told.
  void end_job(Job& j, std::optional<store::JobStatus> status);
  // The node whose manager runs a job's program and serves its driver's leases: the head's node
  // when it has `needs` (a submission's entrypoint resources), else the live node that has them
  // with the most of them free. Empty when none has them.
  std::pair<std::string, std::string> driver_node(const Res& needs = {});

 private:
  // A job with a shape joins the queue (queue_requests.cc), decided at the turn's end.
  void submit_queued(Incoming& in);
  void decide_submissions();
  // A preempted job's program exited: it waits in the queue again.
  void requeue_job(Job& j);
  void tell_nodes_job_ended(const std::string& id);
  // A line of the head's in the job's log (its copy in the control store).
  void note_in_log(const std::string& id, const std::string& line);
  // Starts a job's program (its submission) on the driver node as run `attempt`; `fail` hears why
  // it could not.
  void start_program(const std::string& id, const nlohmann::json& sub, uint32_t attempt,
                     std::function<void(const std::string&)> fail);
  // Sends a request to a node manager; the answer goes to `in`'s sender. `then` sees it first.
  void forward(Incoming& in, const std::string& address, detail::Frames request, uint64_t rid,
               std::function<void(const detail::InMessage&)> then = {});

  // Jobs submitted to the queue this turn, answered once its cycle has decided them.
  struct Undecided {
    std::string routing_id;
    uint64_t request_id;
    std::string job, entrypoint;
  };
  std::vector<Undecided> undecided_;
  detail::Messenger& io_;
  std::string token_;
  const Replies& reply_;
  store::Tables* tables_;
  ClusterNodes* nodes_;
  JobTable* jobs_;
  JobQueue* queue_;
  ActorManager* actors_;
  GroupManager* groups_;
  const std::string& head_node_;
  std::string team_key_;
  std::function<void(const std::string&)> publish;
};

}  // namespace yard::sched
