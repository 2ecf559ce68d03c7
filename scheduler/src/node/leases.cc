#include "node/node_manager.h"

#include <signal.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "policy/leases.h"

namespace yard::sched {

using namespace detail;

namespace {
std::string res_json(const Res& m) { return nlohmann::json(m).dump(); }
}  // namespace

void NodeManager::on_request_lease(Incoming& in) {
  auto rl = in.msg->env().getBody().getRequestLease();
  Lease l;
  l.spilled = rl.getSpilled();
  l.no_wait = rl.getNoWait();
  l.node_id = rl.getNodeId();
  l.soft = rl.getSoft();
  l.spread = rl.getSpread();
  l.pg = rl.getPlacementGroup();
  l.bundle = rl.getBundleIndex();
  if (rl.getResources().size()) {
    l.need.clear();
    if (auto bad = read_resources(rl.getResources(), l.need)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
  }
  l.seq = ++lease_seq_;
  l.routing = in.routing_id;
  l.req = in.msg->env().getRequestId();
  l.job = rl.getJobId();
  l.count = std::max<uint32_t>(1, rl.getCount());
  l.deadline = Clock::now() + std::chrono::milliseconds(std::max<uint32_t>(1000, rl.getTimeoutMs()) - 500);
  // A job registered elsewhere (tasks spilled here) is looked up, its binary fetched if needed.
  with_job(l.job, [this, l](Result<Job*> j) mutable {
    if (!j) {
      reply_.error(l.routing, l.req, wire::ErrorCode::NOT_FOUND, j.why());
      return;
    }
    leases_.push_back(std::move(l));
    process_leases();
  });
}

void NodeManager::answer_lease(Lease& l) {
  OutMessage m(token_, l.req, true);
  auto lg = m.env().getBody().initLeaseGranted();
  // Fewer than asked for: say where more could be had.
  if (l.assigned.size() < l.count && !l.spilled) {
    auto target = peers_.spill_target(node_id_, l.need);
    if (!target.empty()) lg.setSpillback(target);
  }
  auto ws = lg.initWorkers(static_cast<unsigned>(l.assigned.size()));
  for (unsigned i = 0; i < l.assigned.size(); ++i) {
    auto& w = workers_.at(l.assigned[i]);
    ws[i].setWorkerId(w.id);
    ws[i].setAddress(w.address);
  }
  io_->reply(l.routing, m.finish());
}

void NodeManager::process_leases() {
  for (auto it = leases_.begin(); it != leases_.end();) {
    bool done = it->pg.empty() ? serve_lease(*it) : serve_in_bundle(*it);
    it = done ? leases_.erase(it) : std::next(it);
  }
}

void NodeManager::answer_spillback(const Lease& l, const std::string& address) {
  OutMessage m(token_, l.req, true);
  m.env().getBody().initLeaseGranted().setSpillback(address);
  io_->reply(l.routing, m.finish());
}

std::string NodeManager::lease_worker(Lease& l, const Devices& devices) {
  bool gpu = !devices.empty();
  if (auto* idle = gpu ? nullptr : workers_.idle_of(l.job)) {
    idle->state = WState::kLeased;
    l.assigned.push_back(idle->id);
    return idle->id;
  }
  auto wid = spawn_worker(l.job, "", l.seq, 0, devices);
  workers_.at(wid).dedicated = gpu;
  ++l.starting;
  return wid;
}

// A lease inside a placement group: served by the bundle's node, from the bundle's resources.
bool NodeManager::serve_in_bundle(Lease& l) {
  BundleRoute route;
  try {
    route = bundle_route(l);
  } catch (const std::exception& e) {
    spdlog::error("placing a lease in group {}: {}", l.pg, e.what());
  }
  switch (route.kind) {
    case BundleRoute::Kind::kWait: return false;
    case BundleRoute::Kind::kElsewhere: answer_spillback(l, route.address); return true;
    case BundleRoute::Kind::kInfeasible: reply_.error(l.routing, l.req, wire::ErrorCode::INFEASIBLE, route.why); return true;
    case BundleRoute::Kind::kHere: break;
  }
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  std::string key = bundle_key(l.pg, l.bundle);
  while (l.assigned.size() + l.starting < l.count && reserve_bundle(*redis_, key, route.total, l.need)) {
    Devices devices;
    if (gpu > 0) {
      auto d = gpus_.take(gpu);
      if (!d) {
        release_bundle(*redis_, key, l.need);
        break;
      }
      devices = *d;
    }
    std::string wid;
    try {
      wid = lease_worker(l, devices);
    } catch (const std::exception& e) {
      release_bundle(*redis_, key, l.need);
      gpus_.give(devices);
      break;
    }
    workers_.at(wid).held = l.need;
    workers_.at(wid).bundle = key;
  }
  l.spilled = true;  // never sent elsewhere: the bundle is here
  if (l.starting == 0 && !l.assigned.empty()) {
    answer_lease(l);
    return true;
  }
  return false;
}

// Any other lease: routed first (affinity, SPREAD, a node that could never hold it), then served
// from this node's resources, spilled to a node with room, or kept waiting.
bool NodeManager::serve_lease(Lease& l) {
  bool routed = !l.spilled && ((!l.node_id.empty() && l.node_id != node_id_) || l.spread);
  if (routed || !fits(l.need, total_)) peers_.refresh_if_stale();  // only then does the route look at peers
  policy::LeaseRequest req{l.need, l.node_id, l.soft, l.spread, l.spilled};
  auto route = policy::route_lease(peers_.view(), {node_id_, total_, avail_, 0}, req, spread_turn_);
  if (route.used_turn) ++spread_turn_;
  if (route.kind == policy::LeaseRoute::Kind::kInfeasible) {
    reply_.error(l.routing, l.req, wire::ErrorCode::INFEASIBLE, route.why);
    return true;
  }
  if (route.kind == policy::LeaseRoute::Kind::kElsewhere) {
    answer_spillback(l, peers_.listed(route.node));
    return true;
  }
  // Decided: served here (soft affinity to a gone node, SPREAD's turn here, hard affinity here).
  if (routed || (!l.node_id.empty() && !l.soft)) l.spilled = true;
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  while (l.assigned.size() + l.starting < l.count && take_local(l.need)) {
    Devices devices;
    if (gpu > 0) {
      auto d = gpus_.take(gpu);
      if (!d) {  // the shares left are too fragmented for this request now
        give_local(l.need);
        break;
      }
      devices = *d;
    }
    try {
      workers_.at(lease_worker(l, devices)).held = l.need;
    } catch (const std::exception& e) {
      give_local(l.need);
      gpus_.give(devices);
      reply_.error(l.routing, l.req, wire::ErrorCode::INTERNAL, std::string("cannot start a worker: ") + e.what());
      return true;
    }
  }
  if (l.starting > 0) return false;
  if (!l.assigned.empty()) {
    answer_lease(l);  // fewer than asked for: it says where more could be had
    return true;
  }
  if (!l.spilled) {
    // Nothing free here: send the submitter to a node that has room (one hop only).
    if (auto target = peers_.spill_target(node_id_, l.need); !target.empty()) {
      answer_spillback(l, target);
      return true;
    }
  }
  if (l.no_wait) {
    answer_lease(l);  // nothing anywhere: the submitter keeps its workers busier instead
    return true;
  }
  return false;
}

void NodeManager::on_return_lease(Incoming& in) {
  auto rl = in.msg->env().getBody().getReturnLease();
  for (auto id : rl.getWorkerIds()) {
    auto* w = workers_.find(id);
    if (!w || w->state != WState::kLeased) continue;
    if (w->dedicated) {
      kill(w->pid, SIGKILL);  // its exit gives back its resources and devices
      continue;
    }
    give_held(*w);
    w->held.clear();
    w->bundle.clear();
    w->state = WState::kIdle;
  }
  reply_.ok(in);
  process_leases();
}

// This node's own resources go through the same atomic scripts as the head's placements.
bool NodeManager::take_local(const Res& need) {
  if (fenced_ || !fits(need, avail_)) return false;
  try {
    if (!reserve(*redis_, {{node_id_, need}})) {
      for (auto& [k, v] : need) avail_[k] -= v;
      return true;
    }
  } catch (const std::exception& e) {
    spdlog::error("reserving {}: {}", res_json(need), e.what());
  }
  refresh_local();
  return false;
}

void NodeManager::give_local(const Res& need) {
  if (need.empty()) return;
  try {
    release(*redis_, node_id_, need);
  } catch (const std::exception& e) {
    spdlog::error("releasing {}: {}", res_json(need), e.what());
  }
  refresh_local();
}

void NodeManager::give_held(const Worker& w) {
  if (w.bundle.empty()) return give_local(w.held);
  try {
    release_bundle(*redis_, w.bundle, w.held);
  } catch (const std::exception& e) {
    spdlog::error("giving back {} to {}: {}", res_json(w.held), w.bundle, e.what());
  }
}

NodeManager::BundleRoute NodeManager::bundle_route(Lease& l) {
  auto infeasible = [](std::string why) { return BundleRoute{BundleRoute::Kind::kInfeasible, {}, std::move(why), {}}; };
  auto g = tables_->group(l.pg);
  if (!g) return infeasible("no placement group " + l.pg + " (or its record is unreadable)");
  const auto& bundles = g->bundles;
  const auto& nodes = g->nodes;
  int n = static_cast<int>(bundles.size());
  if (l.bundle >= n || l.bundle < -1)
    return infeasible("placement group " + l.pg + " has " + std::to_string(n) + " bundles; there is no bundle " +
                      std::to_string(l.bundle));
  int pick = l.bundle;
  if (pick < 0) {
    for (int i = 0; i < n && pick < 0; ++i)
      if (nodes[static_cast<size_t>(i)] == node_id_ && fits(l.need, bundles[static_cast<size_t>(i)])) pick = i;
    for (int i = 0; i < n && pick < 0; ++i)
      if (fits(l.need, bundles[static_cast<size_t>(i)])) pick = i;
    if (pick < 0) return infeasible("no bundle of placement group " + l.pg + " can hold " + res_json(l.need));
  }
  auto& b = bundles[static_cast<size_t>(pick)];
  if (!fits(l.need, b))
    return infeasible("bundle " + std::to_string(pick) + " of placement group " + l.pg + " (" + res_json(b) +
                      ") cannot hold " + res_json(l.need));
  const std::string& node = nodes[static_cast<size_t>(pick)];
  if (node.empty()) return {};  // not (re)placed yet: wait
  if (node == node_id_) {
    l.bundle = pick;
    return {BundleRoute::Kind::kHere, {}, {}, b};
  }
  auto address = peers_.address(node);
  if (address.empty()) return {};
  l.bundle = pick;
  return {BundleRoute::Kind::kElsewhere, address, {}, {}};
}

void NodeManager::refresh_local() {
  try {
    avail_ = read_res(*redis_, avail_key(node_id_));
  } catch (const std::exception& e) {
    spdlog::error("reading this node's resources: {}", e.what());
  }
}


}  // namespace yard::sched
