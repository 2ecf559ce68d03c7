// Placement policies: where an actor, a placement group's bundles or a spilled task lease go.
//
// Pure functions over a read-only picture of the cluster (ClusterView): no Redis, no sockets, no
// clock. The head builds the view from its cached node table, asks, and then takes the resources
// with the control store's atomic scripts (which have the last word: a failed reservation
// refreshes the view and the request waits). Every answer is one of three: placed on a node,
// wait (it fits some node's totals, but none has room now), or infeasible with the reason (no
// node of the cluster could ever hold it: the caller fails the request at once).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "policy/res.h"

namespace yard::sched::policy {

// What the policies see of a node that can take work (alive, not draining).
struct NodeState {
  std::string id;
  Res total, avail;
  int actors = 0;  // live actors placed there (only SPREAD reads it; a view may leave it 0)
};

struct ClusterView {
  std::vector<NodeState> nodes;

  // The node named `id` (a lookup once indexed, else a pass), nullptr when not in the view.
  const NodeState* find(const std::string& id) const;
  // An actor placed on a node: `r` taken from its free resources, one more actor counted there,
  // so a pass that places several in a row sees its own earlier placements. Unknown ids are
  // ignored.
  void place(const std::string& id, const Res& r);

  // The amounts again as flat rows (one per node, a column per resource name), for a view of
  // thousands of nodes: a pass over them then reads contiguous numbers instead of a map per
  // node. Built by index(); set_avail() keeps a node's row and its map alike. A view without it
  // is read from the maps, with the same answers.
  //
  // index() also orders the nodes, by busyness (then position) and by actors (then busyness,
  // then position): actor placement walks an order from its front and stops at the first node
  // with room, instead of passing over every node (10,000 nodes: about 130 µs a placement here).
  // A view's amounts and actor counts change through set_avail and set_actors, which keep the
  // rows and the orders; a view changed otherwise is indexed again.
  void index();
  bool indexed() const { return !keys.empty() || nodes.empty(); }
  void set_avail(size_t node, Res avail);
  void set_actors(size_t node, int actors);
  std::vector<std::string> keys;     // the columns
  std::vector<double> total, avail;  // nodes.size() rows of keys.size()
  std::vector<double> busy;          // each node's utilisation (its busiest resource, memory aside)
  std::set<std::pair<double, size_t>> by_busy;            // (busy, position)
  std::set<std::tuple<int, double, size_t>> by_actors;    // (actors, busy, position)
  std::unordered_map<std::string, size_t> at;             // id -> position
};

enum class Outcome { kPlaced, kWait, kInfeasible };

struct Decision {
  Outcome outcome = Outcome::kWait;
  std::string node;  // kPlaced
  std::string why;   // kInfeasible

  static Decision placed(std::string node) { return {Outcome::kPlaced, std::move(node), {}}; }
  static Decision wait() { return {}; }
  static Decision infeasible(std::string why) { return {Outcome::kInfeasible, {}, std::move(why)}; }
};

// ---- actors -------------------------------------------------------------------------------

enum class ActorStrategy {
  kDefault,  // the caller's node while it is under half busy, else the least busy that fits
  kSpread,   // the node with the fewest actors (then the least busy)
};
// "" → kDefault, "SPREAD" → kSpread; nullopt for anything else.
std::optional<ActorStrategy> parse_actor_strategy(std::string_view s);

struct ActorRequest {
  Res resources;
  ActorStrategy strategy = ActorStrategy::kDefault;
  std::string affinity_node;  // empty: none
  bool soft = false;          // affinity is a preference: elsewhere when that node cannot take it
  std::string local_node;     // the caller's node (kDefault prefers it)
};

Decision place_actor(const ClusterView& view, const ActorRequest& req);

// Why no node of the view could ever hold `need`: the resources no node has enough of, or that
// no single node has all of them.
std::string infeasible_reason(const ClusterView& view, const Res& need);

// ---- placement groups ------------------------------------------------------------------------

enum class BundleStrategy { kPack, kSpread, kStrictPack, kStrictSpread };
// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"; nullopt for anything else.
std::optional<BundleStrategy> parse_bundle_strategy(std::string_view s);
const char* name(BundleStrategy s);

struct GroupRequest {
  std::vector<Res> bundles;
  BundleStrategy strategy = BundleStrategy::kPack;
  // The node each bundle already has ("" for a bundle still to place: a new group has none; a
  // group that lost a node has some). Empty means none placed.
  std::vector<std::string> placed;
  // Judge the request against the nodes' totals first (a new group): an impossible one is
  // kInfeasible. Off for a group being re-placed, which waits for nodes instead.
  bool check_feasible = true;
};

struct GroupDecision {
  Outcome outcome = Outcome::kWait;
  std::vector<std::string> nodes;  // kPlaced: the node of every bundle (placed ones unchanged)
  std::string why;                 // kInfeasible
};

// PACK: everything unplaced on one node if any can take it (the one the group already uses, else
// the busiest that fits, leaving free nodes whole), else bundle by bundle, packing. STRICT_PACK:
// one node or wait. SPREAD: bundle by bundle on the nodes with the fewest of the group's bundles,
// then the least busy. STRICT_SPREAD: a distinct node per bundle or wait.
GroupDecision place_bundles(const ClusterView& view, const GroupRequest& req);

// ---- task leases ----------------------------------------------------------------------------

// Where a node manager that cannot grant a lease sends the submitter: the other node with the
// most free CPUs that has room for `need` now, or with `ever`, whose totals hold it. Empty when
// none.
std::string spill_target(const ClusterView& peers, const std::string& self, const Res& need, bool ever);

}  // namespace yard::sched::policy
