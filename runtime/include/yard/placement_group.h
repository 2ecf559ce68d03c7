// Placement groups: bundles of resources reserved together, all or nothing, on one node or
// spread over several, for the actors and tasks placed into them. Included by yard/yard.h.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace yard {

// A placement group: bundles of resources reserved together, all or nothing, on nodes chosen by
// the strategy. Actors are placed into its bundles (ActorCreator::placement_group).
enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

using Bundle = std::map<std::string, double>;
class PlacementGroup;

// A placement group as the cluster records it.
struct PlacementGroupInfo {
  std::string id, name, job;
  std::string name_space;           // where its name lives (its job's namespace)
  PlacementStrategy strategy = PlacementStrategy::kPack;
  std::string state;                // PENDING, CREATED or RESCHEDULING (a node of it was lost)
  std::vector<Bundle> bundles;
  std::vector<std::string> nodes;   // each bundle's node, "" while unplaced
};
// The cluster's live placement groups, of every job (a removed group is gone). Needs yard::init.
std::vector<PlacementGroupInfo> placement_groups();
// The live group of that name in a namespace (this process's, get_namespace(), when none is
// given; a name is one live group's in a namespace), or the live group of that id: nullopt when
// there is none.
std::optional<PlacementGroup> get_placement_group(const std::string& name, const std::string& name_space = {});
std::optional<PlacementGroup> placement_group_by_id(const std::string& id);

class PlacementGroup {
 public:
  PlacementGroup() = default;
  const std::string& id() const { return id_; }
  size_t bundle_count() const { return bundles_.size(); }
  const std::vector<Bundle>& bundles() const { return bundles_; }
  // Waits until every bundle is reserved. False when the timeout passed first.
  bool wait(std::chrono::milliseconds timeout) const;
  // The node of each bundle (empty strings until it is created).
  std::vector<std::string> bundle_nodes() const;
  // Frees its resources; actors in it are killed. Returns at once: requests this process makes
  // afterwards see the resources freed (other processes, a moment later).
  void remove() const;

 private:
  friend PlacementGroup placement_group(std::vector<Bundle>, PlacementStrategy, const std::string&);
  friend std::optional<PlacementGroup> placement_group_by_id(const std::string&);
  friend std::optional<PlacementGroup> get_placement_group(const std::string&, const std::string&);
  std::string id_;
  std::vector<Bundle> bundles_;
  std::shared_ptr<std::atomic<bool>> created_;  // known created: wait() needs no round trip
};

// Asks for a placement group. Returns at once (wait() for it). One that no arrangement of the
// cluster's nodes could hold stays pending (a node may join; the driver's log says why), and can
// be removed; with the cluster's `[scheduling] infeasible = "fail"` it throws InfeasibleError.
PlacementGroup placement_group(std::vector<Bundle> bundles, PlacementStrategy strategy = PlacementStrategy::kPack,
                               const std::string& name = {});

}  // namespace yard
