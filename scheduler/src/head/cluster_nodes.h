// The nodes as the head sees them: membership, addresses and resources from the control store
// (refreshed every 250 ms and when needed), which are dead or draining, and the head's
// reservations of their resources: all or nothing in one atomic script, with the resources of
// removed placement groups given back in the same round trip (or within a few milliseconds).
//
// The placement policies' view of the nodes that can take work is kept here, up to date with
// every reservation and release, so that placing one actor or group costs no read of the control
// store and no copy of the cluster. Its actor counts (for SPREAD) are taken when the nodes that
// take work change, and every 5 s, and counted up with every placement in between.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "yard/internal/messaging.h"
#include "policy/placement.h"
#include "result.h"
#include "store/tables.h"

namespace yard::sched {

// How old a check for joined nodes may be when an actor or group is placed.
inline constexpr std::chrono::milliseconds kJoinCheckAge{50};

class ClusterNodes {
 public:
  struct Node {
    std::string id, address, hostname;
    Res total, avail;
    bool alive = false;  // heartbeating, not draining, resources offered
  };
  using Items = std::vector<std::pair<std::string, Res>>;  // (node, resources)

  ClusterNodes(detail::Redis& redis, store::Tables& tables, detail::Messenger& io)
      : redis_(redis), tables_(tables), io_(io) {}

  // Reads every node's record and resources (pending releases go first).
  void refresh();
  // Reads every known node's free resources again, one small read per node (pending releases go
  // first); everything when a node joined or left since the last refresh.
  void refresh_free();
  // Refreshes when a node joined or left since the last refresh (one small read otherwise). With
  // `fresh_enough`, a view read or checked that recently is taken as it is (a burst of creations
  // costs no read each). True when it read.
  bool refresh_if_joined(std::chrono::milliseconds fresh_enough = std::chrono::milliseconds(0));
  const Node* find(const std::string& id) const;
  std::string address(const std::string& id) const;  // "" when unknown
  const std::map<std::string, Node>& all() const { return nodes_; }
  // The nodes that can take work now, for the placement policies.
  const policy::ClusterView& view() const { return view_; }
  // Counts the actors on each node of the view (at every refresh).
  void count_actors_with(std::function<void(policy::ClusterView&)> count) { count_actors_ = std::move(count); }
  // Reads one node's free resources again (nodes give back what their workers held straight to
  // the control store): true when the view changed.
  bool reread(const std::string& node);
  // Whether some node of the view could ever hold `need` (its totals), cached per request
  // until the view is rebuilt.
  bool fits_some_node(const Res& need);
  // One more actor placed on `node` (its resources already reserved).
  void count_placed(const std::string& node);

  bool dead(const std::string& id) const { return dead_.count(id) > 0; }
  std::set<std::string> dead_ids() const { return dead_; }
  void mark_dead(const std::string& id);
  void mark_alive(const std::string& id);
  void start_drain(const std::string& id);
  void end_drain(const std::string& id) { draining_.erase(id); }
  // How many nodes are alive, draining, dead or unavailable (joining, or without resources).
  std::map<std::string, int> by_state() const;

  // Takes the items' resources, all or nothing (`then_hset` is written in the same atomic step);
  // the view follows. What did not fit (the view of those nodes is read again then).
  Problem reserve(const Items& items, const std::vector<std::string>& then_hset = {});
  // Gives resources back, and deletes keys, with the next reservation or within 2 ms.
  void release_later(const Items& items, const std::vector<std::string>& keys);
  void flush();

 private:
  detail::Redis& redis_;
  store::Tables& tables_;
  detail::Messenger& io_;
  // The view again from nodes_ (membership or liveness changed); one node's free resources.
  void rebuild_view();
  void update_view(const std::string& node);

  std::map<std::string, Node> nodes_;
  policy::ClusterView view_;
  std::unordered_map<std::string, size_t> in_view_;  // node -> index in view_.nodes
  std::function<void(policy::ClusterView&)> count_actors_;
  bool takes_work(const Node& n, bool offers) const;
  long long version_ = -1;
  std::chrono::steady_clock::time_point version_read_{};  // when version_ was last read
  static constexpr std::chrono::seconds kRecount{5};        // how often refresh_free counts the actors
  std::chrono::steady_clock::time_point counted_{};         // when they were last counted
  std::map<Res, bool> feasible_;  // fits_some_node's answers for this view  // the membership's version at the last refresh
  std::set<std::string> dead_, draining_;
  Items pending_release_;
  std::vector<std::string> pending_del_;
  bool flush_scheduled_ = false;
};

}  // namespace yard::sched
