// Leases as a node sees them: requests for workers arrive and answers leave here, and a returned
// worker's resources go back. The queue (node/lease_queue.h) decides who gets which worker; the
// desk gives it the node's view of the cluster (the other nodes, placement groups, the
// autoscaler's node types) and a worker for each lease it serves: an idle one of the job, or a
// new process, which registers later.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/service.h"
#include "node/job_runner.h"
#include "node/lease_queue.h"
#include "node/local_resources.h"
#include "node/peers.h"
#include "node/worker_pool.h"
#include "policy/autoscale.h"
#include "store/tables.h"

namespace yard::sched {

class LeaseDesk final : private LeaseQueue::Node {
 public:
  struct Context {
    detail::Messenger& io;
    std::string token;
    std::string node_id;
    store::Tables& tables;
    WorkerPool& workers;
    LocalResources& res;
    Peers& peers;
    JobRunner& jobs;
    // Starts a task worker of `job` for lease `seq` with `devices`; its id. Throws when it cannot.
    // Starts a worker of the job for lease `seq`, with these devices and runtime environment.
    std::function<std::string(const std::string& job, uint64_t seq, const WorkerPool::Devices& devices,
                              const std::string& runtime_env)>
        spawn;
    // A lease answered with `workers` workers after `waited` seconds (metrics, the job's timeline).
    std::function<void(const std::string& job, double waited, size_t workers)> answered;
  };
  explicit LeaseDesk(Context c);

  void on_request(Incoming& in);
  void on_return(Incoming& in);
  // The process of this node's worker `worker_id` exited: what was leased to it comes back.
  void lessee_gone(const std::string& worker_id);
  // What a worker holds goes back to the node or to its bundle.
  void give_held(const WorkerPool::Worker& w);
  // With every heartbeat: the autoscaler's node types and the cluster's infeasible setting read,
  // this node's waiting leases written (with why, for those no running node can hold), and what
  // its task leases hold by job.
  void exchange_demand();
  LeaseQueue& queue() { return queue_; }

 private:
  void release(WorkerPool::Worker& w);  // a leased worker back to the pool (a dedicated one exits)
  const policy::ClusterView& peers(bool fresh) override;
  std::string address_of(const std::string& id) override { return peers_.address(id); }
  std::string spill_target(const Res& need) override { return peers_.spill_target(node_id_, need); }
  std::optional<LeaseQueue::Group> group(const std::string& id) override;
  bool could_add_node(const Res& need) override { return policy::some_type_holds(autoscale_types_, need); }
  bool infeasible_waits() override { return !infeasible_fails_; }
  std::pair<std::string, bool> worker(const LeaseQueue::Lease& l, const Res& need, const BundleRef& bundle,
                                      const WorkerPool::Devices& devices) override;
  void grant(const LeaseQueue::Lease& l, const std::string& more_at) override;
  void redirect(const LeaseQueue::Lease& l, const std::string& address) override;
  void refuse(const LeaseQueue::Lease& l, LeaseQueue::Refusal why, const std::string& message) override;

  detail::Messenger& io_;
  std::string token_, node_id_;
  Replies reply_{io_, token_};
  store::Tables& tables_;
  WorkerPool& workers_;
  LocalResources& res_;
  Peers& peers_;
  JobRunner& jobs_;
  std::function<std::string(const std::string&, uint64_t, const WorkerPool::Devices&, const std::string&)> spawn_;
  std::function<void(const std::string&, double, size_t)> answered_;
  LeaseQueue queue_;
  std::vector<policy::NodeType> autoscale_types_;  // empty: the cluster has no autoscaler
  std::string autoscale_json_, demand_json_, held_json_;  // as last read / written
  bool infeasible_fails_ = false;                  // the cluster's [scheduling] infeasible = "fail"
};

}  // namespace yard::sched
