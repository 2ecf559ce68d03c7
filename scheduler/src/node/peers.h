// The other nodes as a node manager sees them, for routing leases (spillback, affinity, SPREAD,
// bundles elsewhere): alive nodes with free resources, and where each listens. Read from the
// control store with every heartbeat, and again where needed when older than 100 ms.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "policy/placement.h"
#include "store/tables.h"

namespace yard::sched {

class Peers {
 public:
  explicit Peers(std::unique_ptr<store::Tables>& tables) : tables_(tables) {}
  void refresh();
  void refresh_if_stale();
  const policy::ClusterView& view() const { return view_; }
  // A live node's address, or "" (refreshed first when stale).
  std::string address(const std::string& node);
  // The address of a node in the current view (one a policy just chose from it).
  std::string listed(const std::string& node) const {
    auto a = addresses_.find(node);
    return a == addresses_.end() ? std::string() : a->second;
  }
  // Where a lease this node cannot serve now could go: a node (not `self`) with room for `need`
  // now (most free CPUs first), or with `ever`, one whose totals hold it; its address or "".
  std::string spill_target(const std::string& self, const Res& need, bool ever = false);

 private:
  std::unique_ptr<store::Tables>& tables_;
  policy::ClusterView view_;
  std::map<std::string, std::string> addresses_;
  std::chrono::steady_clock::time_point at_{};
};

}  // namespace yard::sched
