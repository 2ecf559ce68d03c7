#include "sim/sim_node.h"

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched::sim {

using namespace detail;
using B = wire::Envelope::Body;

SimNode::SimNode(SimStore& store, std::string id, const std::string& host, const std::string& token, Res total,
                 std::shared_ptr<zmq::context_t> ctx, std::string head)
    : store_(store), id_(std::move(id)), token_(token), total_(std::move(total)), head_(std::move(head)) {
  io_.open(std::make_unique<IoLoop>(host, 0, token_, [this](Incoming in) { handle(std::move(in)); }, std::move(ctx)));
}

SimNode::~SimNode() { io_->stop(); }

const std::string& SimNode::address() const { return io_->address(); }

void SimNode::handle(Incoming in) {
  reply_.guarded(in, [&] {
    switch (in.msg->env().getBody().which()) {
      case B::HOST_ACTOR: return host(in);
      case B::PUSH_TASK:
      case B::PUSH_TASKS:  // each call of it comes as a request of its own (in.push_task())
        return in.push_task().getActorId().size() ? call(in) : run_task(in);
      case B::REQUEST_LEASE: return lease(in);
      case B::RETURN_LEASE: return return_lease(in);
      case B::KILL_HOSTED: return kill_hosted(in);
      case B::JOB_ENDED: return job_ended(in);
      case B::SUBMIT_JOB: return start_program(in);
      case B::STOP_JOB: return stop_program(in);
      case B::SHUTDOWN: return leave(in);
      default:
        reply_.error(in, wire::ErrorCode::BAD_REQUEST, "node " + id_ + " is a simulated node manager, not the head");
    }
  });
}

void SimNode::host(Incoming& in) {
  auto ha = in.msg->env().getBody().getHostActor();
  auto ca = ha.getCreate();
  std::string aid = ca.getActorId();
  Res release;
  if (auto bad = read_resources(ha.getRelease(), release)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
  auto refuse = [&](wire::ErrorCode code, const std::string& why) {
    give(release);
    reply_.error(in, code, why);
  };
  if (aid.empty() || actors_.count(aid)) return refuse(wire::ErrorCode::BAD_REQUEST, "actor id missing or already hosted here");
  std::string cls_name = ca.getClassName();
  const auto* cls = Registry::global().actor_class(cls_name);
  if (!cls)
    return refuse(wire::ErrorCode::ACTOR_DIED, "actor class " + cls_name + " is not registered in " + self_exe() +
                                                   ": simulated node " + id_ + " hosts only classes registered there");
  Hosted h;
  h.job = ca.getJobId();
  h.detached = ca.getDetached();
  h.held = release;
  h.cls = cls;
  try {
    std::vector<Bytes> args;
    for (auto v : ca.getArgs()) args.push_back(in.msg->value(v));
    h.instance = cls->factory(args);
  } catch (const std::exception& e) {
    return refuse(wire::ErrorCode::ACTOR_DIED, "the constructor of " + cls_name + " threw: " + e.what());
  }
  actors_.emplace(aid, std::move(h));
  count_.store(actors_.size());
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto info = m.env().getBody().initActorInfo();
  info.setActorId(aid);
  info.setAddress(io_->address());
  info.setWorkerId("sim-" + aid);
  info.setNodeId(id_);
  info.setState(detail::to_wire(store::ActorState::kAlive));
  io_->reply(in.routing_id, m.finish());
}

void SimNode::call(Incoming& in) {
  auto pt = in.push_task();
  std::string fn = pt.getFunction();
  auto it = actors_.find(pt.getActorId());
  if (it == actors_.end())
    return reply_.error(in, wire::ErrorCode::ACTOR_DIED, "no actor " + std::string(pt.getActorId()) + " on node " + id_);
  auto& h = it->second;
  auto method = h.cls->methods.find(fn);
  if (method == h.cls->methods.end())
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "actor class " + h.cls->name + " has no method " + fn);
  answer(in, h.cls->name + "::" + fn, [&](const std::vector<Bytes>& args) { return method->second(h.instance.get(), args); });
}

void SimNode::answer(Incoming& in, const std::string& what, const Invoker& run) {
  Bytes result;
  try {
    std::vector<Bytes> args;
    for (auto v : in.push_task().getArgs()) args.push_back(in.msg->value(v));
    result = run(args);
  } catch (const std::exception& e) {
    return reply_.error(in, wire::ErrorCode::TASK_ERROR, what + " threw: " + e.what());
  }
  OutMessage m(token_, in.request_id(), true);
  m.set_value(m.env().getBody().initTaskReply().initResult(), result);
  io_->reply(in.routing_id, m.finish());
}

// As many of the workers asked for as the node's free resources hold now, each taking its share
// in the control store; none when nothing fits now.
void SimNode::lease(Incoming& in) {
  auto rl = in.msg->env().getBody().getRequestLease();
  if (rl.getPlacementGroup().size())
    return reply_.error(in, wire::ErrorCode::INFEASIBLE,
                        "node " + id_ + " is simulated: it leases no workers inside placement groups");
  Res need;
  if (auto bad = read_resources(rl.getResources(), need)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *bad);
  if (need.empty()) need = {{"CPU", 1.0}};
  if (!fits(need, total_))
    return reply_.error(in, wire::ErrorCode::INFEASIBLE, "node " + id_ + " has " + res_text(total_) +
                                                             ": a worker needing " + res_text(need) + " never fits");
  std::vector<std::string> granted;
  {
    std::lock_guard lock(store_.mu);
    for (uint32_t i = 0; i < std::max<uint32_t>(1, rl.getCount()) && store_.ledger->take(id_, need); ++i)
      granted.push_back("sim-w-" + random_hex(8));
  }
  for (auto& w : granted) leased_[w] = Leased{rl.getJobId(), need};
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto ws = m.env().getBody().initLeaseGranted().initWorkers(static_cast<unsigned>(granted.size()));
  for (unsigned i = 0; i < granted.size(); ++i) {
    ws[i].setWorkerId(granted[i]);
    ws[i].setAddress(io_->address());
  }
  io_->reply(in.routing_id, m.finish());
}

void SimNode::run_task(Incoming& in) {
  std::string name = in.push_task().getFunction();
  const auto* fn = Registry::global().function(name);
  if (!fn)
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "function " + name + " is not registered in " + self_exe() +
                                                            ": simulated node " + id_ + " runs only functions registered there");
  answer(in, name, *fn);
}

void SimNode::return_lease(Incoming& in) {
  for (auto w : in.msg->env().getBody().getReturnLease().getWorkerIds())
    if (auto it = leased_.find(w); it != leased_.end()) {
      give(it->second.held);
      leased_.erase(it);
    }
  reply_.ok(in);
}

void SimNode::kill_hosted(Incoming& in) {
  auto it = actors_.find(in.msg->env().getBody().getKillHosted());
  if (it != actors_.end()) drop(it);
  reply_.ok(in);
}

void SimNode::job_ended(Incoming& in) {
  std::string job = in.msg->env().getBody().getJobEnded();
  for (auto it = actors_.begin(); it != actors_.end();) {
    auto next = std::next(it);
    if (it->second.job == job && !it->second.detached) drop(it);
    it = next;
  }
  std::erase_if(leased_, [&](const auto& l) {
    if (l.second.job != job) return false;
    give(l.second.held);
    return true;
  });
  reply_.ok(in);
}

void SimNode::start_program(Incoming& in) {
  auto sj = in.msg->env().getBody().getSubmitJob();
  std::string id = sj.getJobId();
  if (id.empty())
    return reply_.error(in, wire::ErrorCode::BAD_REQUEST,
                        "node " + id_ + " is simulated: it runs only the programs of jobs the head's queue admitted");
  std::optional<store::JobRecord> rec;
  {
    std::lock_guard lock(store_.mu);
    rec = store_.tables->jobs.get(id);
    if (rec) {
      rec->node = id_;
      rec->status = store::JobStatus::kRunning;
      rec->start = unix_time();
      store_.tables->jobs.save(*rec);
    }
  }
  if (!rec) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "job " + id + " has no record in the control store");
  programs_.insert(id);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto ji = m.env().getBody().initJobInfo();
  ji.setJobId(id);
  ji.setEntrypoint(rec->entrypoint);
  ji.setStatus(store::name(rec->status));
  ji.setStartTime(rec->start);
  io_->reply(in.routing_id, m.finish());
}

// The program "exits" at once, as by SIGTERM, and the head hears that its job ended.
void SimNode::stop_program(Incoming& in) {
  std::string id = in.msg->env().getBody().getStopJob();
  if (!programs_.erase(id)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no program of job " + id + " runs on node " + id_);
  {
    std::lock_guard lock(store_.mu);
    if (auto rec = store_.tables->jobs.get(id)) {
      rec->status = store::JobStatus::kStopped;
      rec->exit_code = 128 + 15;
      rec->end = unix_time();
      store_.tables->jobs.save(*rec);
    }
  }
  reply_.ok(in);
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setFinishJob(id);
  notify(io_, head_, m.finish(), rid);
}

void SimNode::leave(Incoming& in) {
  reply_.ok(in);
  actors_.clear();
  programs_.clear();
  leased_.clear();
  count_.store(0);
  left_.store(true);
  std::lock_guard lock(store_.mu);
  try {
    store_.tables->nodes.remove(id_);
  } catch (const std::exception& e) {
    spdlog::error("node {} leaving: {}", id_, e.what());
  }
  spdlog::info("node {} left the cluster", id_);
}

void SimNode::rejoin() {
  io_->post([this] {
    actors_.clear();
    leased_.clear();
    programs_.clear();  // the head runs them again elsewhere (or fails them)
    count_.store(0);
    std::lock_guard lock(store_.mu);
    store_.ledger->open(id_, total_);
  });
}

void SimNode::drop(std::map<std::string, Hosted>::iterator it) {
  give(it->second.held);
  actors_.erase(it);
  count_.store(actors_.size());
}

void SimNode::give(const Res& r) {
  if (r.empty()) return;
  std::lock_guard lock(store_.mu);
  store_.ledger->give(id_, r);
}

}  // namespace yard::sched::sim
