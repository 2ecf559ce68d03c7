// A submitted job whose node is lost (head/job_requests.h: node_lost): its program runs again on
// another node while its retries last, else the job fails and its log says why.
#include <spdlog/spdlog.h>

#include "head/job_requests.h"
#include "yard/process.h"

namespace yard::sched {

using namespace detail;

void JobRequests::node_lost(const std::string& node) {
  for (Job* found : jobs_->programs_on(node)) {
    Job* j = jobs_->reload(found->id);  // the node may have written it since
    if (!j || j->ended || j->node != node || j->status != store::JobStatus::kRunning) continue;
    std::string id = j->id;
    auto text = tables_->jobs.submission(id);
    auto sub = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    int used = sub.is_object() ? sub.value("node_restarts", 0) : 0;
    int retries = sub.is_object() ? sub.value("max_retries", 0) : 0;
    if (used >= retries) {
      std::string why = "its program's node " + node + " was lost" +
                        (retries ? " and its " + std::to_string(retries) + " retries are used" : " (no --max-retries)");
      note_in_log(id, "[yard] job " + id + " failed: " + why);
      spdlog::warn("job {} failed: {}", id, why);
      j->status = store::JobStatus::kFailed;
      j->exit_code = -1;
      j->end = sys::unix_time();
      jobs_->save(*j);
      end_job(*j, store::JobStatus::kFailed);
      continue;
    }
    sub["node_restarts"] = used + 1;
    tables_->jobs.set_submission(id, sub.dump());
    // As when its program dies on its node (on_restart_job): the run's actors and groups go.
    actors_->job_ended(id);
    groups_->job_ended(id);
    j->driver_pid = 0;
    uint32_t attempt = static_cast<uint32_t>((j->queue ? j->queue->requeues : 0) + used + 2);
    note_in_log(id, "[yard] job " + id + ": its node " + node + " was lost; its program runs again on another node (attempt " +
                        std::to_string(attempt) + ", " + std::to_string(retries - used - 1) + " more retries left)");
    spdlog::warn("job {}: node {} was lost; its program runs again elsewhere (attempt {})", id, node, attempt);
    publish(nlohmann::json{{"type", "job_restarted"}, {"job_id", id}, {"node_id", node}, {"time", sys::unix_time()}}.dump());
    start_program(id, sub, attempt, [this, id](const std::string& why) {
      spdlog::error("job {} cannot run again: {}", id, why);
      note_in_log(id, "[yard] job " + id + " cannot run again: " + why);
      if (Job* job = jobs_->reload(id)) {
        job->status = store::JobStatus::kFailed;
        job->exit_code = -1;
        job->end = sys::unix_time();
        jobs_->save(*job);
        end_job(*job, store::JobStatus::kFailed);
      }
    });
  }
}

void JobRequests::note_in_log(const std::string& id, const std::string& line) {
  try {
    tables_->jobs.append_log(id, line + "\n");
  } catch (const std::exception& e) {
    spdlog::warn("job {}: writing to its log: {}", id, e.what());
  }
}

}  // namespace yard::sched
