#include "node/lease_desk.h"

#include <signal.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace yard::sched {

using namespace detail;

LeaseDesk::LeaseDesk(Context c)
    : io_(c.io), token_(std::move(c.token)), node_id_(std::move(c.node_id)), tables_(c.tables), workers_(c.workers),
      res_(c.res), peers_(c.peers), jobs_(c.jobs), spawn_(std::move(c.spawn)), answered_(std::move(c.answered)),
      queue_(c.res, static_cast<LeaseQueue::Node&>(*this)) {}

void LeaseDesk::on_request(Incoming& in) {
  auto rl = in.msg->env().getBody().getRequestLease();
  LeaseQueue::Lease l;
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
  l.routing = in.routing_id;
  l.req = in.msg->env().getRequestId();
  l.job = rl.getJobId();
  l.requester = rl.getRequester();
  l.runtime_env = rl.getRuntimeEnv();
  l.count = std::max<uint32_t>(1, rl.getCount());
  l.arrived = Clock::now();
  l.deadline = l.arrived + std::chrono::milliseconds(std::max<uint32_t>(1000, rl.getTimeoutMs()) - 500);
  // A job registered elsewhere (tasks spilled here) is looked up, its binary fetched if needed.
  jobs_.with_job(l.job, [this, l](Result<JobRunner::Job*> j) mutable {
    if (!j) return reply_.error(l.routing, l.req, wire::ErrorCode::NOT_FOUND, j.why());
    queue_.add(std::move(l));
  });
}

void LeaseDesk::on_return(Incoming& in) {
  auto rl = in.msg->env().getBody().getReturnLease();
  for (auto id : rl.getWorkerIds())
    if (auto* w = workers_.find(id); w && w->state == WorkerPool::State::kLeased) release(*w);
  reply_.ok(in);
}

void LeaseDesk::lessee_gone(const std::string& worker_id) {
  std::vector<WorkerPool::Worker*> leased;
  workers_.each([&](WorkerPool::Worker& w) {
    if (w.state == WorkerPool::State::kLeased && w.lessee == worker_id) leased.push_back(&w);
  });
  for (auto* w : leased) {
    spdlog::info("{} was leased to {}, whose process exited: it comes back", w->id, worker_id);
    release(*w);
  }
}

void LeaseDesk::release(WorkerPool::Worker& w) {
  w.lessee.clear();
  if (w.dedicated) {
    kill(w.pid, SIGKILL);  // its exit gives back its resources and devices
    return;
  }
  give_held(w);
  w.held.clear();
  w.bundle = {};
  w.state = WorkerPool::State::kIdle;
  queue_.process();
}

void LeaseDesk::give_held(const WorkerPool::Worker& w) {
  if (w.bundle.empty())
    res_.give(w.held);
  else
    res_.give_bundle(w.bundle, w.held);
}

// The autoscaler's node types (a lease no running node holds waits when one of them could) and
// whether such leases fail at once, and the demand of this node's waiting leases for the
// autoscaler to start nodes for and `yard status` to show; written when it changed.
void LeaseDesk::exchange_demand() {
  auto settings = tables_.cluster.lease_settings();
  if (settings.autoscale_types != autoscale_json_ || settings.infeasible_fails != infeasible_fails_) {
    autoscale_json_ = settings.autoscale_types;
    infeasible_fails_ = settings.infeasible_fails;
    autoscale_types_.clear();
    auto j = nlohmann::json::parse(autoscale_json_.empty() ? "[]" : autoscale_json_, nullptr, false);
    if (j.is_array())
      for (auto& t : j)
        if (t.is_object()) autoscale_types_.push_back({"", t.get<Res>(), 0, 1});
    queue_.process();  // waiting leases may now wait for a node rather than fail, or the reverse
  }
  auto why = queue_.waiting_for_nodes();
  nlohmann::json d = nlohmann::json::array();
  for (auto& [need, n] : queue_.waiting_demand()) {
    d.push_back({{"need", need}, {"count", n}});
    if (auto w = why.find(need); w != why.end()) {
      d.back()["reason"] = policy::name(w->second.reason);
      d.back()["detail"] = w->second.detail;
      d.back()["text"] = policy::text(w->second);
    }
  }
  std::string demand = d.empty() ? std::string() : d.dump();
  if (demand != demand_json_) {
    tables_.cluster.set_lease_demand(node_id_, demand);
    demand_json_ = demand;
  }
  // What the job's task leases hold here: its team's usage (the queue's quotas and fair shares).
  auto by_job = workers_.leased_by_job();
  std::string held = by_job.empty() ? std::string() : nlohmann::json(by_job).dump();
  if (held == held_json_) return;
  tables_.cluster.set_lease_holdings(node_id_, held);
  held_json_ = held;
}

// ---- what the lease queue asks of the node ---------------------------------------------------

const policy::ClusterView& LeaseDesk::peers(bool fresh) {
  if (fresh) peers_.refresh_if_stale();
  return peers_.view();
}

std::optional<LeaseQueue::Group> LeaseDesk::group(const std::string& id) {
  std::optional<store::GroupRecord> g;
  try {
    g = tables_.groups.get(id);
  } catch (const std::exception& e) {
    spdlog::error("reading placement group {}: {}", id, e.what());
    throw;  // the lease waits
  }
  if (!g) return std::nullopt;
  return LeaseQueue::Group{g->bundles, g->nodes};
}

// An idle worker of the job (none for GPU leases: those get a process of their own), else a new
// one, registered later.
std::pair<std::string, bool> LeaseDesk::worker(const LeaseQueue::Lease& l, const Res& need, const BundleRef& bundle,
                                               const WorkerPool::Devices& devices) {
  bool gpu = !devices.empty();
  WorkerPool::Worker* w = gpu ? nullptr : workers_.idle_of(l.job, l.runtime_env);
  bool started = !w;
  if (started) {
    w = &workers_.at(spawn_(l.job, l.seq, devices, l.runtime_env));
    w->dedicated = gpu;
  } else {
    w->state = WorkerPool::State::kLeased;
  }
  w->held = need;
  w->bundle = bundle;
  w->lessee = l.requester;
  return {w->id, started};
}

void LeaseDesk::grant(const LeaseQueue::Lease& l, const std::string& more_at) {
  double waited = std::chrono::duration<double>(Clock::now() - l.arrived).count();
  answered_(l.job, waited, l.assigned.size());
  OutMessage m(token_, l.req, true);
  auto lg = m.env().getBody().initLeaseGranted();
  if (!more_at.empty()) lg.setSpillback(more_at);
  if (l.waiting) lg.setWaiting(policy::text(*l.waiting));
  auto ws = lg.initWorkers(static_cast<unsigned>(l.assigned.size()));
  for (unsigned i = 0; i < l.assigned.size(); ++i) {
    auto& w = workers_.at(l.assigned[i]);
    ws[i].setWorkerId(w.id);
    ws[i].setAddress(w.address);
  }
  io_.reply(l.routing, m.finish());
}

void LeaseDesk::redirect(const LeaseQueue::Lease& l, const std::string& address) {
  OutMessage m(token_, l.req, true);
  m.env().getBody().initLeaseGranted().setSpillback(address);
  io_.reply(l.routing, m.finish());
}

void LeaseDesk::refuse(const LeaseQueue::Lease& l, LeaseQueue::Refusal why, const std::string& message) {
  auto code = why == LeaseQueue::Refusal::kInfeasible ? wire::ErrorCode::INFEASIBLE
              : why == LeaseQueue::Refusal::kJobEnded ? wire::ErrorCode::NOT_FOUND
                                                      : wire::ErrorCode::INTERNAL;
  reply_.error(l.routing, l.req, code, message);
}

}  // namespace yard::sched
