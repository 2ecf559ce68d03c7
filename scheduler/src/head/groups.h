// Placement groups at the head: bundles of resources reserved together (PACK, SPREAD,
// STRICT_PACK, STRICT_SPREAD), placed by the bundle policy and taken in one atomic script, placed
// again when a node goes, removed with their job. Actors in a group run on its bundles' resources
// (take / give_back); the actor manager hears of a removed group and of newly placed ones through
// the two hooks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/service.h"
#include "head/cluster_nodes.h"
#include "head/head_wiring.h"
#include "head/job_table.h"
#include "policy/autoscale.h"
#include "policy/placement.h"
#include "policy/waiting.h"
#include "store/tables.h"

namespace yard::sched {

class GroupManager {
 public:
  GroupManager(const HeadWiring& w, JobTable& jobs)
      : io_(w.io), token_(w.token), reply_(w.reply), redis_(w.redis), tables_(w.tables), nodes_(w.nodes), jobs_(jobs) {}

  std::function<void(const std::string& group, const std::string& why)> on_removed;  // its actors die
  std::function<void()> on_placed;  // actors waiting for a bundle may go
  // Whether nodes could be added that hold these bundles (an autoscaler): a new group the running
  // nodes cannot hold then waits for them instead of being refused.
  std::function<bool(const policy::GroupRequest&)> could_add_nodes;
  // Whether a group no arrangement of the nodes can hold waits for nodes to join (the cluster's
  // [scheduling] infeasible setting) instead of being refused.
  std::function<bool()> infeasible_waits;

  void on_create(Incoming& in);
  void on_wait(Incoming& in);
  void on_remove(Incoming& in);
  // Pending groups placed when they fit, waiters past their deadline answered.
  void tick();
  // Bundles there are placed again (the group is RESCHEDULING until they are).
  void node_died(const std::string& node);
  // Bundles on a draining node that no actor uses (`used`) are placed elsewhere.
  void move_off(const std::string& node, const std::function<bool(const std::string& group, int bundle)>& used);
  void job_ended(const std::string& job);

  // Why an actor asking for bundle `bundle` (-1: any) of `group` with `need` is refused at once.
  std::optional<Rejection> check_actor(const std::string& group, int bundle, const Res& need,
                                       const std::string& class_name) const;
  bool gone(const std::string& group) const;
  // A placed bundle with room for `need` (bundle `want`, or any when -1), its resources taken in
  // the control store: (bundle, node); nullopt while none has room.
  std::optional<std::pair<int, std::string>> take(const std::string& group, int want, const Res& need);
  void give_back(const std::string& group, int bundle, const Res& res);

  void rebuild();
  nlohmann::json status() const;
  // The groups waiting for nodes that can hold them, for `yard status` ("waiting").
  nlohmann::json waiting() const;
  // The unplaced bundles of pending groups, for the autoscaler: one demand per bundle (a
  // STRICT_PACK group's as one, its bundles summed).
  std::vector<policy::Demand> pending_demand() const;
  // How many groups there are by state.
  std::map<std::string, int> counts() const;

 private:
  struct Group : store::GroupRecord {
    std::vector<Res> bundle_avail;
    std::vector<PendingReply> waiters;  // answered once CREATED or REMOVED, or at their deadline
    double created_at = 0;
    std::optional<policy::Wait> wait_why;  // no arrangement of the running nodes can hold it
    Clock::time_point waiting_since{};
  };
  // Places the group's unplaced bundles and reserves them: placed (the group is CREATED), wait,
  // or (check_feasible: a new group) infeasible with the reason.
  policy::Decision try_place(Group& g, bool check_feasible);
  policy::Decision wait_for_nodes(Group& g, const policy::GroupRequest& req, const std::string& why);
  void answer_waiters(Group& g);
  void remove(Group& g, const std::string& why);
  void save(const Group& g) { tables_.groups.save(g); }
  void reply_info(const std::string& routing, uint64_t req, const Group& g);

  detail::Messenger& io_;
  const std::string& token_;
  const Replies& reply_;
  detail::Redis& redis_;
  store::Tables& tables_;
  ClusterNodes& nodes_;
  JobTable& jobs_;
  std::map<std::string, Group> groups_;
};

}  // namespace yard::sched
