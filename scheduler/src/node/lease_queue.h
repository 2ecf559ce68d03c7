// The node's lease queue: task submitters' requests for workers.
//
// A request is routed first (policy::route_lease: affinity, SPREAD, a node that could never hold
// it), then served from this node's resources or from a placement-group bundle's, sent on to a
// node with room (spillback), or kept waiting until resources come back, a worker started for it
// registers, or its deadline passes (then it is answered with what it has). The queue owns the
// requests; everything else it reaches through LocalResources and LeaseQueue::Node, so it runs in
// unit tests without the control store, sockets or processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "node/local_resources.h"
#include "policy/placement.h"
#include "policy/waiting.h"

namespace yard::sched {

class LeaseQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Devices = policy::GpuPool::Devices;

  struct Lease {
    uint64_t seq = 0;     // set by add()
    std::string routing;  // who asked, for the answer
    uint64_t req = 0;
    std::string job;
    std::string requester;  // the asking worker's id ("" : a driver, or asked on another node)
    uint32_t count = 1;
    Clock::time_point arrived, deadline;
    std::vector<std::string> assigned;  // worker ids
    int starting = 0;                   // workers started for it, not yet registered
    bool spilled = false;               // sent here by another node (or decided here): never sent on
    bool no_wait = false;               // answered at once with what there is
    Res need{{"CPU", 1.0}};             // per worker
    std::string node_id;                // affinity
    bool soft = false, spread = false;
    std::string pg;  // placement group: served from a bundle's resources
    int bundle = -1;
    std::string runtime_env;  // its workers' environment beyond the job's (JSON; "": the job's)
    std::optional<policy::Wait> waiting;  // no running node can hold it: why (it waits for one that can)
  };
  // A lease that waits for a node that can hold it is answered (empty, with the reason) this soon,
  // so that its submitter can say so and fail what has waited too long; it then asks again.
  static constexpr std::chrono::seconds kWaitingAnswer{1};
  enum class Refusal { kInfeasible, kCannotStart, kStartupFailures, kJobEnded };
  // A placement group's bundles and the node each is placed on ("" while unplaced).
  struct Group {
    std::vector<Res> bundles;
    std::vector<std::string> nodes;
  };

  // What the queue needs of its node besides its resources.
  class Node {
   public:
    virtual ~Node() = default;
    // The other alive nodes (read again first when `fresh` and the picture is old).
    virtual const policy::ClusterView& peers(bool fresh) = 0;
    // Where node `id` listens ("" when it is not alive).
    virtual std::string address_of(const std::string& id) = 0;
    // A node with room for `need` now, for a lease this node cannot serve; its address or "".
    virtual std::string spill_target(const Res& need) = 0;
    // The placement group; nullopt when it does not exist (or cannot be read).
    virtual std::optional<Group> group(const std::string& id) = 0;
    // Whether the cluster could add a node that holds `need` (it has an autoscaler with such a
    // node type): a lease no running node can hold then waits for it instead of being refused.
    virtual bool could_add_node(const Res& need) = 0;
    // Whether a lease no node can hold waits for one that can (a node may join) rather than being
    // refused: the cluster's [scheduling] infeasible setting.
    virtual bool infeasible_waits() = 0;
    // A worker for the lease, holding `need` (from bundle `bundle` unless empty) and `devices`:
    // an idle worker of its job (first: false) or a new one (first: true, it registers later).
    // Throws when no process can be started.
    virtual std::pair<std::string, bool> worker(const Lease& l, const Res& need, const BundleRef& bundle,
                                                const Devices& devices) = 0;
    // Answers: the workers in l.assigned (with where more could be had, or ""); go to `address`;
    // refused.
    virtual void grant(const Lease& l, const std::string& more_at) = 0;
    virtual void redirect(const Lease& l, const std::string& address) = 0;
    virtual void refuse(const Lease& l, Refusal why, const std::string& message) = 0;
  };

  LeaseQueue(LocalResources& res, Node& node) : res_(res), node_(node) {}

  // Queues a request and serves what can be served.
  void add(Lease l);
  // Every waiting lease gets its turn, in arrival order (resources came back, a peer changed).
  void process();
  // Leases whose deadline has passed are answered with what they have.
  void expire(Clock::time_point now);
  // A worker started for lease `seq` registered: true when the lease took it (false: it is gone,
  // the caller keeps the worker idle and gives back what it holds).
  bool worker_ready(uint64_t seq, const std::string& worker);
  // A worker started for lease `seq` died before registering; `give_up` refuses the lease.
  void worker_failed(uint64_t seq, bool give_up, const std::string& why);
  // The job's waiting leases are refused (it has ended).
  void refuse_job(const std::string& job, const std::string& why);
  size_t size() const { return leases_.size(); }
  // What the waiting leases outside placement groups still need, per worker: the demand an
  // autoscaler may start nodes for (each shape at most `cap` times).
  std::vector<std::pair<Res, uint32_t>> waiting_demand(uint32_t cap = 100) const;
  // Of those, the shapes no running node can hold, and why (the first lease's reason).
  std::map<Res, policy::Wait> waiting_for_nodes() const;

 private:
  struct BundleRoute {
    enum class Kind { kWait, kHere, kElsewhere, kInfeasible };
    Kind kind = Kind::kWait;
    std::string address, why;
    Res total;
  };
  // One lease's turn; true when it has been answered (it leaves the queue).
  bool serve(Lease& l);
  bool serve_in_bundle(Lease& l);
  bool wait_for_node(Lease& l, const std::string& why);
  BundleRoute bundle_route(Lease& l);
  void answer(Lease& l);
  std::deque<Lease>::iterator find(uint64_t seq);

  LocalResources& res_;
  Node& node_;
  std::deque<Lease> leases_;
  uint64_t seq_ = 0;
  size_t spread_turn_ = 0;
};

}  // namespace yard::sched
