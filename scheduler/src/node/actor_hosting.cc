#include "node/actor_hosting.h"

#include <signal.h>

#include <spdlog/spdlog.h>

#include "store/tables.h"

namespace yard::sched {

using namespace detail;
using WState = WorkerPool::State;

void ActorHosting::host(Incoming& in) {
  auto ha = in.msg->env().getBody().getHostActor();
  auto ca = ha.getCreate();
  std::string aid = ca.getActorId();
  Res release;  // what the head took for it on this node: given back if it is not made
  for (auto r : ha.getRelease()) release[r.getName()] = r.getAmount();
  auto fail = [&](wire::ErrorCode code, const std::string& why) {
    res_.give(release);
    reply_.error(in, code, why);
  };
  if (aid.empty() || hosted_.count(aid)) return fail(wire::ErrorCode::BAD_REQUEST, "actor id missing or already hosted here");
  if (res_.fenced()) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " is rejoining");
  // Held while the job's binary may still be on its way; answered when hosting fails or succeeds.
  Hosted h;
  h.routing = in.routing_id;
  h.req = in.msg->env().getRequestId();
  h.msg = std::shared_ptr<InMessage>(std::move(in.msg));
  hosted_.emplace(aid, std::move(h));
  node_.with_job(ca.getJobId(), [this, aid, release](Result<JobRunner::Job*> job) { start(aid, release, job); });
}

void ActorHosting::start(const std::string& aid, const Res& release, Result<JobRunner::Job*> job) {
  auto hit = hosted_.find(aid);
  if (hit == hosted_.end()) {  // killed meanwhile
    res_.give(release);
    return;
  }
  auto& h = hit->second;
  auto fail = [&](wire::ErrorCode code, const std::string& msg) {
    res_.give(release);
    reply_.error(h.routing, h.req, code, msg);
    hosted_.erase(hit);
  };
  if (!job) return fail(wire::ErrorCode::NOT_FOUND, job.why());
  auto c = h.msg->env().getBody().getHostActor();
  double gpu = 0;
  for (auto r : c.getResources())
    if (std::string(r.getName()) == "GPU") gpu += r.getAmount();
  WorkerPool::Devices devices;
  if (gpu > 0) {
    auto d = res_.take_gpus(gpu);
    if (!d) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " has no device with that share of a GPU free");
    devices = *d;
  }
  std::string wid;
  try {
    wid = node_.spawn_actor_worker(job.value()->id, aid, c.getNumRestarts(), devices, c.getCreate().getRuntimeEnv());
  } catch (const std::exception& e) {
    res_.give_gpus(devices);
    return fail(wire::ErrorCode::INTERNAL, std::string("cannot start its worker on node ") + node_id_ + ": " + e.what());
  }
  auto& w = workers_.at(wid);
  w.held = release;
  w.detached = c.getCreate().getDetached();
  h.worker = wid;
}

void ActorHosting::registered(WorkerPool::Worker& w) {
  auto hit = hosted_.find(w.actor_id);
  if (hit == hosted_.end()) {
    ::kill(w.pid, SIGKILL);
    return;
  }
  auto& h = hit->second;
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto src = h.msg->env().getBody().getHostActor().getCreate();
  auto ia = m.env().getBody().initInstantiateActor();
  ia.setActorId(w.actor_id);
  ia.setJobId(src.getJobId());
  ia.setClassName(src.getClassName());
  ia.setName(src.getName());
  ia.setMaxConcurrency(src.getMaxConcurrency());
  ia.setConcurrency(src.getConcurrency());
  ia.setConcurrencyGroups(src.getConcurrencyGroups());
  auto args = ia.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], h.msg->value(src.getArgs()[i]));
  io_.request(w.address, rid, m.finish(),
               [this, aid = w.actor_id, wid = w.id](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 if (!err) constructed(aid, wid, *r);  // else the worker's exit answers the head
               },
               std::chrono::seconds(120));
}

void ActorHosting::constructed(const std::string& aid, const std::string& wid, const InMessage& r) {
  auto it = hosted_.find(aid);
  if (it == hosted_.end() || it->second.worker != wid || it->second.replied) return;
  auto& h = it->second;
  auto* w = workers_.find(wid);
  if (!w) return;
  h.replied = true;
  auto body = r.env().getBody();
  if (body.isError()) {
    auto code = body.getError().getCode() == wire::ErrorCode::TASK_ERROR ? wire::ErrorCode::ACTOR_DIED
                                                                         : body.getError().getCode();
    reply_.error(h.routing, h.req, code, body.getError().getMessage());
    hosted_.erase(it);
    ::kill(w->pid, SIGKILL);  // its exit then gives its resources back
    return;
  }
  w->state = WState::kActor;
  h.msg.reset();
  OutMessage m(token_, h.req, true);
  auto info = m.env().getBody().initActorInfo();
  info.setActorId(aid);
  // A worker that listens for the actor's calls on a port of their own says where.
  bool own_port = body.isActorInfo() && body.getActorInfo().getAddress().size() > 0;
  info.setAddress(own_port ? std::string(body.getActorInfo().getAddress()) : w->address);
  info.setWorkerId(wid);
  info.setNodeId(node_id_);
  info.setState(detail::to_wire(store::ActorState::kAlive));
  io_.reply(h.routing, m.finish());
}

void ActorHosting::kill(Incoming& in) {
  std::string aid = in.msg->env().getBody().getKillHosted();
  auto h = hosted_.find(aid);
  if (h != hosted_.end()) {
    workers_.stop(h->second.worker);
    if (!h->second.replied) reply_.error(h->second.routing, h->second.req, wire::ErrorCode::ACTOR_DIED, "killed by request");
    hosted_.erase(h);  // killed on purpose: nothing to report
  }
  reply_.ok(in);
}

void ActorHosting::worker_gone(const WorkerPool::Worker& w, const std::string& cause) {
  auto h = hosted_.find(w.actor_id);
  if (h == hosted_.end() || h->second.worker != w.id) return;
  // A worker lost while constructing is a crash, not a failed constructor: the head restarts
  // the actor within its restart budget, as it does for a worker lost later.
  if (!h->second.replied)
    reply_.error(h->second.routing, h->second.req, wire::ErrorCode::WORKER_CRASHED,
                 "its worker died while constructing it: " + cause);
  else
    node_.actor_lost(w.actor_id, cause);
  hosted_.erase(h);
}

}  // namespace yard::sched
