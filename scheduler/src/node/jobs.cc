// Job requests on the wire: `yard submit` runs a program here (on the head's node), `yard stop-job`
// stops it, the head says when a job has ended; the job runner (node/job_runner.h) does the work.
#include "node/node_manager.h"

namespace yard::sched {

using namespace detail;

void NodeManager::on_submit_job(Incoming& in) {
  auto sj = in.msg->env().getBody().getSubmitJob();
  JobRunner::Submission sub;
  for (auto a : sj.getEntrypoint()) sub.argv.push_back(a);
  sub.cwd = sj.getCwd();
  sub.workdir = sj.getWorkingDir();
  sub.max_retries = sj.getMaxRetries();
  sub.id = sj.getJobId();
  sub.attempt = static_cast<int>(std::max<uint32_t>(1, sj.getAttempt()));
  for (auto kv : sj.getEnv()) {
    std::string s = kv;
    auto eq = s.find('=');
    if (eq != std::string::npos) sub.env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  // Its uploaded working directory is fetched from the head first when this node lacks it.
  std::string routing = in.routing_id, workdir = sub.workdir;
  uint64_t req = in.msg->env().getRequestId();
  auto start = [this, routing, req](JobRunner::Submission sub) {
    auto j = jobs_->submit(std::move(sub));
    if (!j) return reply_.error(routing, req, wire::ErrorCode::BAD_REQUEST, j.why());
    OutMessage m(token_, req, true);
    auto ji = m.env().getBody().initJobInfo();
    ji.setJobId(j.value()->id);
    ji.setEntrypoint(j.value()->entrypoint);
    ji.setStatus(store::name(j.value()->status));
    ji.setStartTime(j.value()->start);
    ji.setLogPath(j.value()->log_path);
    io_->reply(routing, m.finish());
  };
  if (workdir.empty()) return start(std::move(sub));
  blobs_.fetch(workdir, [this, routing, req, start, sub = std::move(sub)](const Problem& why) mutable {
    if (why)
      return reply_.error(routing, req, wire::ErrorCode::UNAVAILABLE,
                          "the job's working directory could not be fetched from the head: " + *why);
    start(std::move(sub));
  });
}

void NodeManager::on_stop_job(Incoming& in) {
  if (auto why = jobs_->stop(in.msg->env().getBody().getStopJob())) return reply_.error(in, wire::ErrorCode::NOT_FOUND, *why);
  reply_.ok(in);
}

// The head ended a job (its driver finished or died): its workers here stop. A job whose program
// runs here ends when that program exits.
void NodeManager::on_job_ended(Incoming& in) {
  std::string id = in.msg->env().getBody().getJobEnded();
  reply_.ok(in);
  jobs_->ended_elsewhere(id);
}

void NodeManager::tell_head_job_ended(const std::string& job_id) {
  tell_head([job_id](wire::Envelope::Builder env) { env.getBody().setFinishJob(job_id); }, "job " + job_id + " ended");
}

}  // namespace yard::sched
