#include "node/lease_queue.h"

#include <algorithm>
#include <map>

#include "policy/leases.h"

namespace yard::sched {

void LeaseQueue::add(Lease l) {
  l.seq = ++seq_;
  if (l.arrived == Clock::time_point{}) l.arrived = Clock::now();
  leases_.push_back(std::move(l));
  process();
}

void LeaseQueue::process() {
  for (auto it = leases_.begin(); it != leases_.end();) {
    bool done = it->pg.empty() ? serve(*it) : serve_in_bundle(*it);
    it = done ? leases_.erase(it) : std::next(it);
  }
}

void LeaseQueue::expire(Clock::time_point now) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->deadline <= now) {
      answer(*it);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
}

std::deque<LeaseQueue::Lease>::iterator LeaseQueue::find(uint64_t seq) {
  return std::find_if(leases_.begin(), leases_.end(), [&](const Lease& x) { return x.seq == seq; });
}

bool LeaseQueue::worker_ready(uint64_t seq, const std::string& worker) {
  auto l = find(seq);
  if (l == leases_.end()) return false;
  l->assigned.push_back(worker);
  if (--l->starting == 0) {
    answer(*l);
    leases_.erase(l);
  }
  return true;
}

void LeaseQueue::worker_failed(uint64_t seq, bool give_up, const std::string& why) {
  auto l = find(seq);
  if (l == leases_.end()) return;
  --l->starting;
  if (!give_up) return;
  node_.refuse(*l, Refusal::kStartupFailures, why);
  leases_.erase(l);
}

void LeaseQueue::refuse_job(const std::string& job, const std::string& why) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->job == job) {
      node_.refuse(*it, Refusal::kJobEnded, why);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::pair<Res, uint32_t>> LeaseQueue::waiting_demand(uint32_t cap) const {
  std::map<Res, uint32_t> by_shape;
  for (auto& l : leases_) {
    if (!l.pg.empty() || !l.node_id.empty() || l.starting > 0) continue;
    size_t want = l.count > l.assigned.size() ? l.count - l.assigned.size() : 0;
    auto& n = by_shape[l.need];
    n = std::min<uint32_t>(cap, n + static_cast<uint32_t>(want));
  }
  std::vector<std::pair<Res, uint32_t>> out;
  for (auto& [need, n] : by_shape)
    if (n > 0) out.emplace_back(need, n);
  return out;
}

// Fewer workers than asked for: the answer says where more could be had.
void LeaseQueue::answer(Lease& l) {
  std::string more_at;
  if (l.assigned.size() < l.count && !l.spilled) more_at = node_.spill_target(l.need);
  node_.grant(l, more_at);
}

// Any lease outside a placement group: routed first (affinity, SPREAD, a node that could never
// hold it), then served from this node's resources, spilled to a node with room, or kept waiting.
bool LeaseQueue::serve(Lease& l) {
  bool routed = !l.spilled && ((!l.node_id.empty() && l.node_id != res_.node()) || l.spread);
  // Only a routed lease, or one this node could never hold, looks at the peers.
  const auto& peers = node_.peers(routed || !fits(l.need, res_.total()));
  policy::LeaseRequest req{l.need, l.node_id, l.soft, l.spread, l.spilled};
  auto route = policy::route_lease(peers, res_.state(), req, spread_turn_);
  if (route.used_turn) ++spread_turn_;
  if (route.kind == policy::LeaseRoute::Kind::kInfeasible) return !wait_for_node(l, route.why);
  l.waiting.reset();
  if (route.kind == policy::LeaseRoute::Kind::kElsewhere) {
    node_.redirect(l, node_.address_of(route.node));
    return true;
  }
  // Decided: served here (soft affinity to a gone node, SPREAD's turn here, hard affinity here).
  if (routed || (!l.node_id.empty() && !l.soft)) l.spilled = true;
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  while (l.assigned.size() + static_cast<size_t>(l.starting) < l.count && res_.take(l.need)) {
    Devices devices;
    if (gpu > 0) {
      auto d = res_.take_gpus(gpu);
      if (!d) {  // the shares left are too fragmented for this request now
        res_.give(l.need);
        break;
      }
      devices = *d;
    }
    try {
      auto [id, started] = node_.worker(l, l.need, {}, devices);
      if (started) ++l.starting; else l.assigned.push_back(id);
    } catch (const std::exception& e) {
      res_.give(l.need);
      res_.give_gpus(devices);
      node_.refuse(l, Refusal::kCannotStart, std::string("cannot start a worker: ") + e.what());
      return true;
    }
  }
  if (l.starting > 0) return false;
  if (!l.assigned.empty()) {
    answer(l);
    return true;
  }
  if (!l.spilled) {
    // Nothing free here: send the submitter to a node that has room (one hop only).
    if (auto target = node_.spill_target(l.need); !target.empty()) {
      node_.redirect(l, target);
      return true;
    }
  }
  if (l.no_wait) {
    answer(l);  // nothing anywhere: the submitter keeps its workers busier instead
    return true;
  }
  return false;
}

// A lease no running node can hold (`why`) waits for a node that can, when the autoscaler could
// start one or the cluster waits for one to join; else it is refused. True when it waits.
bool LeaseQueue::wait_for_node(Lease& l, const std::string& why) {
  if (!l.node_id.empty()) {  // a node affinity names a node that is gone or could never hold it
    node_.refuse(l, Refusal::kInfeasible, why);
    return false;
  }
  l.waiting = policy::wait_for_nodes(node_.could_add_node(l.need), node_.infeasible_waits(), why);
  if (!l.waiting) {
    node_.refuse(l, Refusal::kInfeasible, why);
    return false;
  }
  l.deadline = std::min(l.deadline, l.arrived + kWaitingAnswer);
  return true;
}

std::map<Res, policy::Wait> LeaseQueue::waiting_for_nodes() const {
  std::map<Res, policy::Wait> out;
  for (auto& l : leases_)
    if (l.waiting) out.emplace(l.need, *l.waiting);
  return out;
}

// A lease inside a placement group: served by the bundle's node, from the bundle's resources.
bool LeaseQueue::serve_in_bundle(Lease& l) {
  BundleRoute route;  // the group unreadable now: wait
  try {
    route = bundle_route(l);
  } catch (const std::exception&) {
  }
  switch (route.kind) {
    case BundleRoute::Kind::kWait: return false;
    case BundleRoute::Kind::kElsewhere: node_.redirect(l, route.address); return true;
    case BundleRoute::Kind::kInfeasible: node_.refuse(l, Refusal::kInfeasible, route.why); return true;
    case BundleRoute::Kind::kHere: break;
  }
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  BundleRef b{l.pg, l.bundle};
  while (l.assigned.size() + static_cast<size_t>(l.starting) < l.count && res_.take_bundle(b, route.total, l.need)) {
    Devices devices;
    if (gpu > 0) {
      auto d = res_.take_gpus(gpu);
      if (!d) {
        res_.give_bundle(b, l.need);
        break;
      }
      devices = *d;
    }
    try {
      auto [id, started] = node_.worker(l, l.need, b, devices);
      if (started) ++l.starting; else l.assigned.push_back(id);
    } catch (const std::exception&) {
      res_.give_bundle(b, l.need);
      res_.give_gpus(devices);
      break;
    }
  }
  l.spilled = true;  // never sent elsewhere: the bundle is here
  if (l.starting == 0 && !l.assigned.empty()) {
    answer(l);
    return true;
  }
  return false;
}

// For a lease in a placement group: served here from bundle l.bundle (any bundle that holds it
// when -1, this node's first), at the bundle's node elsewhere, wait (the bundle is not placed
// yet), or infeasible.
LeaseQueue::BundleRoute LeaseQueue::bundle_route(Lease& l) {
  auto infeasible = [](std::string why) { return BundleRoute{BundleRoute::Kind::kInfeasible, {}, std::move(why), {}}; };
  auto g = node_.group(l.pg);
  if (!g) return infeasible("no placement group " + l.pg + " (or its record is unreadable)");
  int n = static_cast<int>(g->bundles.size());
  if (l.bundle >= n || l.bundle < -1 || g->nodes.size() != g->bundles.size())
    return infeasible("placement group " + l.pg + " has " + std::to_string(n) + " bundles; there is no bundle " +
                      std::to_string(l.bundle));
  auto bundle = [&](int i) -> const Res& { return g->bundles[static_cast<size_t>(i)]; };
  auto node = [&](int i) -> const std::string& { return g->nodes[static_cast<size_t>(i)]; };
  int pick = l.bundle;
  for (int i = 0; i < n && pick < 0; ++i)
    if (node(i) == res_.node() && fits(l.need, bundle(i))) pick = i;
  for (int i = 0; i < n && pick < 0; ++i)
    if (fits(l.need, bundle(i))) pick = i;
  if (pick < 0) return infeasible("no bundle of placement group " + l.pg + " can hold " + res_text(l.need));
  if (!fits(l.need, bundle(pick)))
    return infeasible("bundle " + std::to_string(pick) + " of placement group " + l.pg + " (" + res_text(bundle(pick)) +
                      ") cannot hold " + res_text(l.need));
  if (node(pick).empty()) return {};  // not (re)placed yet: wait
  if (node(pick) == res_.node()) {
    l.bundle = pick;
    return {BundleRoute::Kind::kHere, {}, {}, bundle(pick)};
  }
  auto address = node_.address_of(node(pick));
  if (address.empty()) return {};
  l.bundle = pick;
  return {BundleRoute::Kind::kElsewhere, address, {}, {}};
}

}  // namespace yard::sched
