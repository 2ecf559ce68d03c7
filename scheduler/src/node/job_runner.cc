#include "node/job_runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/service.h"
#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

// The record as this node knows it; a record the head wrote keeps what only the head knows (the
// driver's binary and pid), with this node's status, exit code and end time.
void JobRunner::save(const Job& j) {
  store::JobRecord r = j;
  if (auto cur = tables_.jobs.get(j.id)) {
    r = *cur;
    r.status = j.status;
    r.exit_code = j.exit_code;
    r.end = j.end;
    if (j.runs_here) {  // this node started its program (a job the head admitted from its queue)
      r.entrypoint = j.entrypoint;
      r.log_path = j.log_path;
      r.start = j.start;
      r.proc_pid = j.proc_pid;
      r.cwd = j.cwd;
      r.workdir = j.workdir;
      r.submitted = true;
    }
  }
  r.node = s_.node_id;
  tables_.jobs.save(r);
}

Result<const JobRunner::Job*> JobRunner::submit(Submission sub) {
  using R = Result<const Job*>;
  if (sub.argv.empty()) return R::fail("empty entrypoint");
  std::string ep;
  for (auto& a : sub.argv) ep += (ep.empty() ? "" : " ") + a;
  std::string cwd = sub.cwd;
  if (!sub.workdir.empty()) {
    auto dir = blobs_.unpack_workdir(sub.workdir);
    if (!dir) return R::fail("the job's working directory: " + dir.why());
    cwd = dir.value();
    if (sub.argv[0].find('/') != std::string::npos && sub.argv[0][0] != '/') sub.argv[0] = cwd + "/" + sub.argv[0];
  }
  sub.argv[0] = which(sub.argv[0]);
  uint64_t log_shipped = 0;
  if (auto old = jobs_.find(sub.id); !sub.id.empty() && old != jobs_.end()) {
    // Queued again after a preemption: the last run ended here; this is the next.
    if (!old->second.ended) return R::fail("job " + sub.id + " still runs on node " + s_.node_id);
    log_shipped = old->second.log_shipped;  // the next run appends to the same log
    jobs_.erase(old);
  }
  Job j;
  j.id = sub.id.empty() ? tables_.jobs.new_id() : sub.id;
  j.submitted = true;
  j.runs_here = true;
  j.entrypoint = ep;
  j.cwd = cwd;
  j.workdir = sub.workdir;
  j.log_path = s_.log_dir + "/" + j.id + ".log";
  j.log_shipped = log_shipped;
  j.start = unix_time();
  j.argv = sub.argv;
  j.env = sub.env;
  j.retries_left = std::max(0, sub.max_retries);
  j.attempt = std::max(1, sub.attempt);
  {
    std::ofstream log(j.log_path, std::ios::app);
    if (j.attempt > 1) log << "[yard] job " << j.id << " admitted again: attempt " << j.attempt << "\n";
  }
  if (auto why = spawn_program(j)) return R::fail("cannot start the job: " + *why);
  if (sub.id.empty()) tables_.jobs.add(j.id);
  save(j);
  spdlog::info("job {} submitted: {} (pid {})", j.id, ep, j.proc_pid);
  auto id = j.id;
  return R::ok(&jobs_.emplace(id, std::move(j)).first->second);
}

// The program as its own process group, with the cluster's address and token, the job's id and
// its attempt (YARD_JOB_ATTEMPT: 1, then 2... when it runs again), output to the job's log.
Problem JobRunner::spawn_program(Job& j) {
  SpawnOptions so;
  so.env = {{"YARD_ADDRESS", s_.head_address},
            {"YARD_TOKEN", s_.token},
            {"YARD_SUBMISSION_ID", j.id},
            {"YARD_JOB_ATTEMPT", std::to_string(j.attempt)}};
  for (auto& [k, v] : j.env) so.env[k] = v;
  so.cwd = j.cwd;
  so.stdout_path = j.log_path;
  so.new_process_group = true;
  so.death_signal = SIGTERM;
  try {
    j.proc_pid = spawn(j.argv, so);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

void JobRunner::rerun(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.ended) return;
  auto& j = it->second;
  if (j.status == store::JobStatus::kStopped) return end(j, store::JobStatus::kStopped, j.exit_code);
  if (auto why = spawn_program(j)) {
    std::ofstream(j.log_path, std::ios::app) << "[yard] job " << id << " cannot run again: " << *why << "\n";
    return end(j, store::JobStatus::kFailed, j.exit_code);
  }
  save(j);
  spdlog::info("job {} runs again: attempt {} (pid {})", id, j.attempt, j.proc_pid);
}

Problem JobRunner::stop(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !it->second.runs_here) return "job " + id + " does not run on node " + s_.node_id;
  auto& j = it->second;
  if (!j.ended) {
    j.status = store::JobStatus::kStopped;
    kill(-static_cast<pid_t>(j.proc_pid), SIGTERM);
    save(j);
    spdlog::info("job {} stop requested", id);
  }
  return std::nullopt;
}

void JobRunner::ended_elsewhere(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.ended) return;
  // Its program, when it runs here, ends the job with its own exit code once the node reaps it
  // (asking whether it is alive would reap it here and lose that code).
  if (it->second.runs_here)
    end(it->second, std::nullopt, 0);
  else
    end(it->second, store::JobStatus::kSucceeded, 0);
}

void JobRunner::end(Job& j, std::optional<store::JobStatus> status, int exit_code) {
  if (j.ended) return;
  if (status && j.status != store::JobStatus::kStopped) j.status = *status;
  if (status) {
    j.ended = true;
    j.exit_code = exit_code;
    j.end = unix_time();
  }
  ended_(j);
  if (j.runs_here && status) {
    // Its whole log is in the control store before its record says it ended.
    for (int i = 0; i < 64 && !ship_log(j); ++i) {
    }
    std::error_code ec;
    auto size = fs::file_size(j.log_path, ec);
    j.log_done = ec || size <= j.log_shipped;  // else the next heartbeats copy the rest
    try {
      save(j);
    } catch (const std::exception& e) {
      spdlog::error("saving job {}: {}", j.id, e.what());
    }
  }
  if (status) spdlog::info("job {} ended: {}", j.id, store::name(j.status));
}

std::optional<JobRunner::Exit> JobRunner::reaped(pid_t pid, int status) {
  for (auto& [id, j] : jobs_) {
    if (j.proc_pid != pid || !j.runs_here || j.ended) continue;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) std::ofstream(j.log_path, std::ios::app) << "[yard] job " << id << " " << describe_exit(status) << "\n";
    // A program that died by a signal (a crash, kill -9, the OOM killer) runs again while it has
    // retries; one that exited with a status gave its own answer.
    if (WIFSIGNALED(status) && j.retries_left > 0 && j.status != store::JobStatus::kStopped) {
      --j.retries_left;
      ++j.attempt;
      j.exit_code = code;
      std::ofstream(j.log_path, std::ios::app) << "[yard] job " << id << " runs again (attempt " << j.attempt << ", "
                                               << j.retries_left << " more retries left)\n";
      return Exit{id, true};
    }
    end(j, code == 0 ? store::JobStatus::kSucceeded : store::JobStatus::kFailed, code);
    return Exit{id, false};
  }
  return std::nullopt;
}

void JobRunner::ship_logs() {
  for (auto& [id, j] : jobs_)
    if (j.runs_here && !j.log_done) ship_log(j);
}

bool JobRunner::ship_log(Job& j) {
  std::ifstream f(j.log_path, std::ios::binary | std::ios::ate);
  if (!f) return true;
  auto size = static_cast<uint64_t>(f.tellg());
  if (size <= j.log_shipped) return true;
  std::string chunk(static_cast<size_t>(std::min(size - j.log_shipped, kShipMax)), '\0');
  f.seekg(static_cast<std::streamoff>(j.log_shipped));
  f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(f.gcount()));
  try {
    tables_.jobs.append_log(j.id, chunk);
  } catch (const std::exception& e) {
    spdlog::warn("copying job {}'s log to the control store: {}", j.id, e.what());
    return true;  // the next heartbeat tries again
  }
  j.log_shipped += chunk.size();
  return j.log_shipped >= size;
}

void JobRunner::check_records() {
  for (auto& [id, j] : jobs_) {
    if (j.runs_here || j.ended) continue;
    try {
      auto rec = tables_.jobs.get(id);
      if (rec && rec->status == store::JobStatus::kRunning) continue;
      if (!rec) spdlog::warn("job {}: its record is gone from the control store", id);
      j.status = rec ? rec->status : store::JobStatus::kFailed;
    } catch (const std::exception& e) {
      spdlog::error("checking job {}: {}", id, e.what());
      continue;
    }
    end(j, j.status, 0);
  }
}

JobRunner::Job* JobRunner::live(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() || it->second.ended ? nullptr : &it->second;
}

// The variables the job was submitted with (`yard submit --env`), from its submission record;
// none for a driver started by hand, or a record that cannot be read.
std::map<std::string, std::string> JobRunner::submitted_env(const std::string& id) {
  std::map<std::string, std::string> env;
  try {
    auto sub = tables_.jobs.submission(id);
    auto s = sub ? nlohmann::json::parse(*sub, nullptr, false) : nlohmann::json();
    if (!s.is_object() || !s.contains("env") || !s["env"].is_array()) return env;
    for (auto& e : s["env"]) {
      if (!e.is_string()) continue;
      auto kv = e.get<std::string>();
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  } catch (const std::exception& e) {
    spdlog::warn("job {}: its submitted variables cannot be read: {}", id, e.what());
  }
  return env;
}

JobRunner::Job* JobRunner::make(const std::string& id, const store::JobRecord& rec, const std::string& binary) {
  auto& j = jobs_[id];
  j.id = id;
  j.binary = binary;
  if (!j.runs_here) j.cwd = fs::is_directory(rec.cwd) ? rec.cwd : s_.session_dir;
  j.entrypoint = rec.entrypoint;
  j.ns = rec.ns;
  if (j.env.empty()) j.env = submitted_env(id);  // its program runs elsewhere: its workers here get it too
  if (rec.queue) j.requeues = rec.queue->requeues;
  if (j.start == 0) j.start = unix_time();
  spdlog::info("job {} runs workers here: {}", id, binary);
  return &j;
}

void JobRunner::with_job(const std::string& job_id, std::function<void(Result<Job*>)> k) {
  using R = Result<Job*>;
  auto it = jobs_.find(job_id);
  if (it != jobs_.end() && !it->second.ended && !it->second.binary.empty()) return k(R::ok(&it->second));
  auto rec = tables_.jobs.get(job_id);
  if (it != jobs_.end() && it->second.ended) {
    // Ended here, unless the queue runs it again (preempted and admitted again): a new run.
    bool next_run = rec && rec->status == store::JobStatus::kRunning && rec->queue &&
                    rec->queue->requeues > it->second.requeues && !it->second.runs_here;
    if (!next_run) return k(R::fail("job " + job_id + " has ended"));
    jobs_.erase(it);
  }
  if (!rec) return k(R::fail("no job " + job_id + " in the control store"));
  if (rec->status != store::JobStatus::kRunning) return k(R::fail("job " + job_id + " is " + store::name(rec->status)));
  std::string digest = rec->digest;
  // The head's node shares the head's machine: it runs the program where the driver has it.
  if (s_.head_node && access(rec->binary.c_str(), X_OK) == 0) digest.clear();
  if (digest.empty()) {
    if (access(rec->binary.c_str(), X_OK) != 0)
      return k(R::fail("job " + job_id + "'s program " + rec->binary + " is not on node " + s_.node_id));
    return k(R::ok(make(job_id, *rec, rec->binary)));
  }
  std::string path = blobs_.path(digest);
  // The binary, then the working directory (if the job was submitted with one).
  auto with_workdir = [this, k, job_id, rec = *rec](const std::string& binary) mutable {
    if (rec.workdir.empty()) return k(R::ok(make(job_id, rec, binary)));
    blobs_.fetch(rec.workdir, [this, k, rec, binary, job_id](const Problem& why) mutable {
      if (why) return k(R::fail("fetching job " + job_id + "'s working directory: " + *why));
      auto dir = blobs_.unpack_workdir(rec.workdir);
      if (!dir) return k(R::fail("job " + job_id + "'s working directory: " + dir.why()));
      Job* j = make(job_id, rec, binary);
      j->cwd = dir.value();
      k(R::ok(j));
    });
  };
  if (access(path.c_str(), X_OK) == 0) return with_workdir(path);
  blobs_.fetch(digest, [k, path, job_id, with_workdir](const Problem& why) mutable {
    if (why) return k(R::fail("fetching job " + job_id + "'s program: " + *why));
    with_workdir(path);
  });
}

void JobRunner::terminate_all() {
  for (auto& [id, j] : jobs_)
    if (j.proc_pid && !j.ended) kill(-static_cast<pid_t>(j.proc_pid), SIGTERM);
}

bool JobRunner::any_running() const {
  for (auto& [id, j] : jobs_)
    if (j.proc_pid && !j.ended && pid_alive(static_cast<pid_t>(j.proc_pid))) return true;
  return false;
}

void JobRunner::abandon_all() {
  for (auto& [id, j] : jobs_) {
    if (!j.runs_here || j.ended || !j.proc_pid) continue;
    kill(-static_cast<pid_t>(j.proc_pid), SIGKILL);
    j.ended = true;
    j.log_done = true;
    spdlog::warn("job {}: its program (pid {}) was stopped: this node was declared dead", id, j.proc_pid);
  }
}

void JobRunner::kill_all() {
  for (auto& [id, j] : jobs_) {
    if (!j.proc_pid || j.ended) continue;
    kill(-static_cast<pid_t>(j.proc_pid), SIGKILL);
    if (j.status != store::JobStatus::kRunning) continue;
    j.status = store::JobStatus::kStopped;
    j.end = unix_time();
    try {
      save(j);
    } catch (...) {
    }
  }
}

}  // namespace yard::sched
