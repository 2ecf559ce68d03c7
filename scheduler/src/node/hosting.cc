#include "node/node_manager.h"

#include <signal.h>

#include <spdlog/spdlog.h>

#include "yard/errors.h"

namespace yard::sched {

using namespace detail;

void NodeManager::on_host_actor(Incoming& in) {
  auto ha = in.msg->env().getBody().getHostActor();
  auto ca = ha.getCreate();
  std::string aid = ca.getActorId();
  Res release;
  for (auto r : ha.getRelease()) release[r.getName()] = r.getAmount();
  auto fail = [&](wire::ErrorCode code, const std::string& why) {
    give_local(release);
    reply_.error(in, code, why);
  };
  if (aid.empty() || hosted_.count(aid)) return fail(wire::ErrorCode::BAD_REQUEST, "actor id missing or already hosted here");
  if (fenced_) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " is rejoining");
  // Held while the job's binary may still be on its way; answered when hosting fails or succeeds.
  Hosted h;
  h.routing = in.routing_id;
  h.req = in.msg->env().getRequestId();
  h.msg = std::shared_ptr<InMessage>(std::move(in.msg));
  hosted_.emplace(aid, std::move(h));
  with_job(ca.getJobId(), [this, aid, release](Result<Job*> job) {
    auto hit = hosted_.find(aid);
    if (hit == hosted_.end()) {  // killed meanwhile
      give_local(release);
      return;
    }
    auto& h = hit->second;
    auto fail = [&](wire::ErrorCode code, const std::string& msg) {
      give_local(release);
      reply_.error(h.routing, h.req, code, msg);
      hosted_.erase(hit);
    };
    if (!job) return fail(wire::ErrorCode::NOT_FOUND, job.why());
    Job* j = job.value();
    auto c = h.msg->env().getBody().getHostActor();
    double gpu = 0;
    for (auto r : c.getResources())
      if (std::string(r.getName()) == "GPU") gpu += r.getAmount();
    Devices devices;
    if (gpu > 0) {
      auto d = gpus_.take(gpu);
      if (!d) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " has no device with that share of a GPU free");
      devices = *d;
    }
    std::string wid;
    try {
      wid = spawn_worker(j->id, aid, 0, c.getNumRestarts(), devices);
    } catch (const std::exception& e) {
      gpus_.give(devices);
      return fail(wire::ErrorCode::INTERNAL, std::string("cannot start its worker on node ") + node_id_ + ": " + e.what());
    }
    auto& w = workers_.at(wid);
    w.held = release;
    w.detached = c.getCreate().getDetached();
    h.worker = wid;
  });
}

void NodeManager::instantiate_hosted(const std::string& aid, Worker& w) {
  auto& h = hosted_.at(aid);
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto src = h.msg->env().getBody().getHostActor().getCreate();
  auto ia = m.env().getBody().initInstantiateActor();
  ia.setActorId(aid);
  ia.setJobId(src.getJobId());
  ia.setClassName(src.getClassName());
  ia.setName(src.getName());
  ia.setMaxConcurrency(src.getMaxConcurrency());
  auto args = ia.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], h.msg->value(src.getArgs()[i]));
  std::string wid = w.id;
  io_->request(w.address, rid, m.finish(),
               [this, aid, wid](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 auto it = hosted_.find(aid);
                 if (it == hosted_.end() || it->second.worker != wid || it->second.replied) return;
                 auto& h = it->second;
                 auto* w = workers_.find(wid);
                 if (err || !w) return;  // the worker's exit answers the head
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   h.replied = true;
                   auto code = body.getError().getCode() == wire::ErrorCode::TASK_ERROR ? wire::ErrorCode::ACTOR_DIED
                                                                                        : body.getError().getCode();
                   reply_.error(h.routing, h.req, code, body.getError().getMessage());
                   hosted_.erase(it);
                   kill(w->pid, SIGKILL);  // its exit then gives its resources back
                   return;
                 }
                 w->state = WState::kActor;
                 h.replied = true;
                 h.msg.reset();
                 OutMessage m(token_, h.req, true);
                 auto info = m.env().getBody().initActorInfo();
                 info.setActorId(aid);
                 info.setAddress(w->address);
                 info.setWorkerId(wid);
                 info.setNodeId(node_id_);
                 info.setState(store::name(store::ActorState::kAlive));
                 io_->reply(h.routing, m.finish());
               },
               std::chrono::seconds(120));
}

void NodeManager::on_kill_hosted(Incoming& in) {
  std::string aid = in.msg->env().getBody().getKillHosted();
  auto h = hosted_.find(aid);
  if (h != hosted_.end()) {
    workers_.kill(h->second.worker);
    if (!h->second.replied) reply_.error(h->second.routing, h->second.req, wire::ErrorCode::ACTOR_DIED, "killed by request");
    hosted_.erase(h);  // killed on purpose: nothing to report
  }
  reply_.ok(in);
}

void NodeManager::report_lost(const std::string& aid, const std::string& cause) {
  tell_head(
      [this, aid, cause](wire::Envelope::Builder env) {
        auto al = env.getBody().initActorLost();
        al.setActorId(aid);
        al.setCause(cause);
        al.setNodeId(node_id_);
      },
      "actor " + aid + " was lost");
}

void NodeManager::tell_head(std::function<void(wire::Envelope::Builder)> fill, std::string what, int attempt) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  fill(m.env());
  io_->request(o_.join_address, rid, m.finish(),
               [this, fill, what, attempt](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 bool again = err || (r->env().getBody().isError() &&
                                      r->env().getBody().getError().getCode() == wire::ErrorCode::UNAVAILABLE);
                 if (!again) return;
                 // The head may be restarting: keep telling it for about a minute.
                 if (attempt < 120)
                   io_->after(std::chrono::milliseconds(500), [this, fill, what, attempt] { tell_head(fill, what, attempt + 1); });
                 else
                   spdlog::error("cannot tell the head that {}: {}", what, err ? err->message : "unavailable");
               },
               std::chrono::seconds(10));
}

}  // namespace yard::sched
