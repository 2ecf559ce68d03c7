// The job queue's requests at the head: a job with a shape joins the queue (`yard submit
// --replicas`), `yard job cancel|hold|release|priority`, and an admitted job's program started on
// the driver node. The queue itself is head/job_queue.h.
#include <spdlog/spdlog.h>

#include "common/credentials.h"
#include "head/job_requests.h"
#include "yard/process.h"

namespace yard::sched {

using namespace detail;

namespace {

Res res_of(capnp::List<wire::Resource>::Reader list) {
  Res r;
  for (auto x : list) r[x.getName()] += x.getAmount();
  return r;
}

policy::BundleStrategy strategy_of(wire::PlacementStrategy s) {
  switch (s) {
    case wire::PlacementStrategy::PACK: return policy::BundleStrategy::kPack;
    case wire::PlacementStrategy::STRICT_PACK: return policy::BundleStrategy::kStrictPack;
    case wire::PlacementStrategy::STRICT_SPREAD: return policy::BundleStrategy::kStrictSpread;
    case wire::PlacementStrategy::SPREAD: break;
  }
  return policy::BundleStrategy::kSpread;
}

}  // namespace

// What to run, kept with the job: until it is admitted, and to run it again elsewhere.
nlohmann::json submission_of(wire::SubmitJob::Reader sj) {
  nlohmann::json s{{"cwd", sj.getCwd().cStr()}, {"working_dir", sj.getWorkingDir().cStr()}, {"max_retries", sj.getMaxRetries()}};
  for (auto a : sj.getEntrypoint()) s["argv"].push_back(a.cStr());
  s["env"] = nlohmann::json::array();
  for (auto e : sj.getEnv()) s["env"].push_back(e.cStr());
  if (sj.hasEntrypointResources() && sj.getEntrypointResources().size() > 0)
    s["entrypoint_resources"] = res_of(sj.getEntrypointResources());
  return s;
}

void JobRequests::submit_queued(Incoming& in) {
  auto sj = in.msg->env().getBody().getSubmitJob();
  auto sh = sj.getShape();
  store::QueueEntry e;
  e.team = sj.getTeam();
  e.priority = sj.getPriority();
  for (auto b : sh.getFixed()) e.shape.fixed.push_back(res_of(b.getResources()));
  e.shape.replica = res_of(sh.getReplica());
  e.shape.min = sh.getMinReplicas();
  e.shape.max = sh.getMaxReplicas();
  e.shape.strategy = strategy_of(sh.getStrategy());
  e.time_limit = sj.getTimeLimit();
  if (!(e.time_limit >= 0)) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "--time-limit must be at least 0 seconds");
  // An unknown team is refused by the queue, with the teams there are.
  if (queue_->has_team(e.team) && !credential_matches(team_key_, e.team, sj.getTeamCredential()))
    return reply_.error(in, wire::ErrorCode::UNAUTHENTICATED,
                        "team '" + e.team + "': its credential is " + (sj.getTeamCredential().size() ? "wrong" : "missing") +
                            " (--team-credential or YARD_TEAM_CREDENTIAL; `yard team-credential " + e.team +
                            "` on the head's machine prints it)");
  std::string ep;
  for (auto a : sj.getEntrypoint()) ep += (ep.empty() ? "" : " ") + std::string(a.cStr());
  if (ep.empty()) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "empty entrypoint");
  auto id = queue_->submit(std::move(e), ep, submission_of(sj));
  if (!id) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, id.why());
  // The submissions of one turn are decided together, by one cycle at its end (admitted at once
  // when they fit), and each is answered with its decision.
  if (undecided_.empty()) io_.at_turn_end([this] { decide_submissions(); });
  undecided_.push_back({in.routing_id, in.msg->env().getRequestId(), id.value(), ep});
}

void JobRequests::decide_submissions() {
  queue_->cycle();
  for (auto& u : undecided_) {
    OutMessage m(token_, u.request_id, true);
    auto ji = m.env().getBody().initJobInfo();
    ji.setJobId(u.job);
    ji.setEntrypoint(u.entrypoint);
    const store::JobRecord* j = queue_->find(u.job);
    ji.setStatus(store::name(j ? j->status : store::JobStatus::kQueued));
    ji.setShaped(true);
    if (auto w = queue_->waiting(u.job)) {
      ji.setWaitReason(policy::name(w->why.reason));
      ji.setWaitDetail(w->why.detail);
    }
    io_.reply(std::move(u.routing_id), m.finish());
  }
  undecided_.clear();
}

void JobRequests::on_job_control(Incoming& in) {
  auto c = in.msg->env().getBody().getJobControl();
  std::string id = c.getJobId();
  JobAction action = JobAction::kCancel;
  switch (c.getAction()) {
    case wire::JobAction::CANCEL: action = JobAction::kCancel; break;
    case wire::JobAction::HOLD: action = JobAction::kHold; break;
    case wire::JobAction::RELEASE: action = JobAction::kRelease; break;
    case wire::JobAction::SET_PRIORITY: action = JobAction::kSetPriority; break;
  }
  const store::JobRecord* q = queue_->find(id);
  // A running job (queued once, or never) is cancelled by stopping its program.
  if (action == JobAction::kCancel && (!q || q->queue->admitted_at > 0)) return on_stop_job(in, id);
  if (!q) {
    bool known = jobs_->find(id) != nullptr;
    return reply_.error(in, known ? wire::ErrorCode::BAD_REQUEST : wire::ErrorCode::NOT_FOUND,
                        known ? "job " + id + " is not in the queue (it was submitted without --replicas, or it ended)"
                              : "no job " + id);
  }
  if (auto why = queue_->control(id, action, c.getPriority())) return reply_.error(in, wire::ErrorCode::BAD_REQUEST, *why);
  jobs_->reload(id);
  queue_->cycle();
  reply_.ok(in);
}

// The admitted job's program on the driver node, under the job's id. A node that cannot start it
// fails the job, with the reason in the head's log.
void JobRequests::start_queued(const store::JobRecord& j, const nlohmann::json& sub) {
  std::string id = j.id;
  // A job queued again after a preemption runs its next attempt: it resumes from its checkpoint.
  start_program(id, sub, static_cast<uint32_t>(j.queue ? j.queue->requeues + 1 : 1), [this, id](const std::string& why) {
    spdlog::error("job {} was admitted but cannot start: {}", id, why);
    if (Job* job = jobs_->reload(id)) {
      job->status = store::JobStatus::kFailed;
      job->exit_code = -1;
      job->end = sys::unix_time();
      jobs_->save(*job);
    }
    queue_->ended(id);
  });
}

void JobRequests::start_program(const std::string& id, const nlohmann::json& sub, uint32_t attempt,
                                std::function<void(const std::string&)> fail) {
  Res needs = entrypoint_resources(sub);
  auto [node, address] = driver_node(needs);
  if (address.empty()) return fail(no_driver_node(needs));
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  auto sj = m.env().getBody().initSubmitJob();
  auto argv = sub.value("argv", nlohmann::json::array());
  auto ep = sj.initEntrypoint(static_cast<unsigned>(argv.size()));
  for (unsigned i = 0; i < argv.size(); ++i) ep.set(i, argv[i].get<std::string>());
  auto env = sub.value("env", nlohmann::json::array());
  auto e = sj.initEnv(static_cast<unsigned>(env.size()));
  for (unsigned i = 0; i < env.size(); ++i) e.set(i, env[i].get<std::string>());
  sj.setCwd(sub.value("cwd", ""));
  sj.setWorkingDir(sub.value("working_dir", ""));
  // Runs after its node was lost used retries (node_lost): what is left of them.
  sj.setMaxRetries(std::max(0, sub.value("max_retries", 0) - sub.value("node_restarts", 0)));
  sj.setJobId(id);
  sj.setAttempt(attempt);
  io_.request(
      address, rid, m.finish(),
      [this, id, fail](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
        if (err) return fail("the node manager did not answer: " + err->message);
        auto body = r->env().getBody();
        if (body.isError()) return fail(body.getError().getMessage());
        jobs_->reload(id);
      },
      std::chrono::seconds(30));
}

void JobRequests::stop_program(const std::string& id) {
  Job* j = jobs_->reload(id);
  std::string address = j ? nodes_->address(j->node) : "";
  if (address.empty()) return spdlog::warn("job {}: its program's node is not known or not reachable; not stopped", id);
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setStopJob(id);
  notify(io_, address, m.finish(), rid);
}

}  // namespace yard::sched
