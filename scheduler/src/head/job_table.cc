#include "head/job_table.h"

#include <signal.h>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched {

JobTable::Job* JobTable::find(const std::string& id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return &it->second;
  auto rec = tables_.jobs.get(id);
  if (!rec) return nullptr;
  Job j;
  static_cast<store::JobRecord&>(j) = std::move(*rec);
  j.ended = j.end > 0;
  return &jobs_.emplace(id, std::move(j)).first->second;
}

JobTable::Job* JobTable::reload(const std::string& id) {
  jobs_.erase(id);
  return find(id);
}

bool JobTable::running(const std::string& id) {
  auto* j = find(id);
  return j && !j->ended;
}

JobTable::Job& JobTable::create(const std::string& entrypoint, const std::string& node) {
  std::string id = tables_.jobs.new_id();
  auto& j = jobs_[id];
  j.id = id;
  j.entrypoint = entrypoint;
  j.start = sys::unix_time();
  j.node = node;
  tables_.jobs.add(id);
  return j;
}

void JobTable::save(const Job& j) { tables_.jobs.save(j); }

std::vector<JobTable::Job*> JobTable::orphaned() {
  std::vector<Job*> out;
  for (auto& [id, j] : jobs_)
    if (!j.ended && !j.submitted && j.driver_pid && kill(static_cast<pid_t>(j.driver_pid), 0) != 0) out.push_back(&j);
  return out;
}

std::set<std::string> JobTable::blobs_in_use() const {
  std::set<std::string> out;
  for (auto& [id, j] : jobs_)
    if (!j.ended)
      for (auto* d : {&j.digest, &j.workdir})
        if (!d->empty()) out.insert(*d);
  return out;
}

std::vector<JobTable::Job*> JobTable::programs_on(const std::string& node) {
  std::vector<Job*> out;
  for (auto& [id, j] : jobs_)
    if (!j.ended && j.submitted && j.node == node) out.push_back(&j);
  return out;
}

size_t JobTable::rebuild() {
  size_t live = 0;
  for (auto& id : tables_.jobs.ids()) {
    auto rec = tables_.jobs.get(id);
    if (!rec || rec->status != store::JobStatus::kRunning) continue;
    Job j;
    static_cast<store::JobRecord&>(j) = std::move(*rec);
    if (j.start == 0) j.start = sys::unix_time();
    auto& jj = jobs_.insert_or_assign(id, std::move(j)).first->second;
    long pid = jj.submitted ? jj.proc_pid : jj.driver_pid;
    if (pid > 0 && !sys::process_dead(static_cast<pid_t>(pid))) {
      spdlog::info("job {} is still running (pid {})", id, pid);
      ++live;
      continue;
    }
    jj.status = store::JobStatus::kFailed;
    jj.ended = true;
    jj.exit_code = -1;
    jj.end = sys::unix_time();
    save(jj);
    spdlog::warn("job {} ended while there was no head", id);
  }
  return live;
}

std::map<std::string, int> JobTable::counts() const {
  std::map<std::string, int> n;
  for (auto& [id, j] : jobs_) ++n[store::name(j.status)];
  return n;
}

}  // namespace yard::sched
