#include "node/peers.h"

#include <spdlog/spdlog.h>

#include "policy/leases.h"

namespace yard::sched {

void Peers::refresh() {
  at_ = std::chrono::steady_clock::now();
  view_.nodes.clear();
  addresses_.clear();
  for (auto& n : tables_->nodes.with_resources())
    if (n.state == store::NodeState::kAlive && !n.address.empty() && n.has_avail) {
      addresses_[n.id] = n.address;
      view_.nodes.push_back({n.id, std::move(n.total), std::move(n.avail), 0});
    }
}

void Peers::refresh_if_stale() {
  if (std::chrono::steady_clock::now() - at_ > std::chrono::milliseconds(100)) refresh();
}

std::string Peers::address(const std::string& node) {
  refresh_if_stale();
  auto p = addresses_.find(node);
  return p == addresses_.end() ? std::string() : p->second;
}

std::string Peers::spill_target(const std::string& self, const Res& need, bool ever) {
  try {
    refresh_if_stale();
  } catch (const std::exception& e) {
    spdlog::error("reading the other nodes' resources: {}", e.what());
  }
  auto id = policy::spill_target(view_, self, need, ever);
  auto a = addresses_.find(id);
  return id.empty() || a == addresses_.end() ? std::string() : a->second;
}

}  // namespace yard::sched
