// The job runner: programs submitted with `yard submit` run here as this node's children (on the
// head's node); every job whose workers run here is known from its record in the control store.
#include "node/node_manager.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

// The record as this node knows it; a record the head wrote keeps what only the head knows (the
// driver's binary and pid), with this node's status, exit code and end time.
void NodeManager::save_job(const Job& j) {
  store::JobRecord r = j;
  if (auto cur = tables_->job(j.id)) {
    r = *cur;
    r.status = j.status;
    r.exit_code = j.exit_code;
    r.end = j.end;
  }
  r.node = node_id_;
  tables_->save_job(r);
}

void NodeManager::on_submit_job(Incoming& in) {
  auto sj = in.msg->env().getBody().getSubmitJob();
  if (sj.getEntrypoint().size() == 0) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, "empty entrypoint");
    return;
  }
  std::vector<std::string> argv;
  std::string ep;
  for (auto a : sj.getEntrypoint()) {
    argv.push_back(a);
    ep += (ep.empty() ? "" : " ") + std::string(a.cStr());
  }
  std::string cwd = sj.getCwd();
  std::string workdir = sj.getWorkingDir();
  if (!workdir.empty()) {
    auto dir = blobs_.unpack_workdir(workdir);
    if (!dir) {
      reply_.error(in, wire::ErrorCode::BAD_REQUEST, "the job's working directory: " + dir.why());
      return;
    }
    cwd = dir.value();
    if (argv[0].find('/') != std::string::npos && argv[0][0] != '/') argv[0] = cwd + "/" + argv[0];
  }
  argv[0] = which(argv[0]);
  std::string id = tables_->new_job_id();
  Job j;
  j.id = id;
  j.submitted = true;
  j.runs_here = true;
  j.entrypoint = ep;
  j.cwd = cwd;
  j.workdir = workdir;
  j.log_path = log_dir_ + "/" + id + ".log";
  j.start = unix_time();
  SpawnOptions so;
  so.env = {{"YARD_ADDRESS", o_.join_address}, {"YARD_TOKEN", token_}, {"YARD_SUBMISSION_ID", id}};
  for (auto kv : sj.getEnv()) {
    std::string s = kv;
    auto eq = s.find('=');
    if (eq != std::string::npos) so.env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  so.cwd = j.cwd;
  so.stdout_path = j.log_path;
  so.new_process_group = true;
  so.death_signal = SIGTERM;
  { std::ofstream(j.log_path, std::ios::app); }
  try {
    j.proc_pid = spawn(argv, so);
  } catch (const std::exception& e) {
    reply_.error(in, wire::ErrorCode::BAD_REQUEST, std::string("cannot start the job: ") + e.what());
    return;
  }
  tables_->add_job(id);
  save_job(j);
  spdlog::info("job {} submitted: {} (pid {})", id, ep, j.proc_pid);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto ji = m.env().getBody().initJobInfo();
  ji.setJobId(id);
  ji.setEntrypoint(ep);
  ji.setStatus(store::name(j.status));
  ji.setStartTime(j.start);
  ji.setLogPath(j.log_path);
  jobs_.emplace(id, std::move(j));
  io_->reply(in.routing_id, m.finish());
}

void NodeManager::on_stop_job(Incoming& in) {
  std::string id = in.msg->env().getBody().getStopJob();
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !it->second.runs_here) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "job " + id + " does not run on node " + node_id_);
    return;
  }
  auto& j = it->second;
  if (!j.ended) {
    j.status = store::JobStatus::kStopped;
    kill(-static_cast<pid_t>(j.proc_pid), SIGTERM);
    save_job(j);
    spdlog::info("job {} stop requested", id);
  }
  reply_.ok(in);
}

// The head ended a job (its driver finished or died): its workers here stop. A job whose program
// runs here ends when that program exits.
void NodeManager::on_job_ended(Incoming& in) {
  std::string id = in.msg->env().getBody().getJobEnded();
  reply_.ok(in);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.ended) return;
  bool running = it->second.runs_here && pid_alive(static_cast<pid_t>(it->second.proc_pid));
  if (running) end_job(it->second, std::nullopt, 0);
  else end_job(it->second, store::JobStatus::kSucceeded, 0);
}

void NodeManager::end_job(Job& j, std::optional<store::JobStatus> status, int exit_code) {
  if (j.ended) return;
  if (status && j.status != store::JobStatus::kStopped) j.status = *status;
  if (status) {
    j.ended = true;
    j.exit_code = exit_code;
    j.end = unix_time();
  }
  // Its workers go with it; detached actors stay.
  workers_.kill_job(j.id);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->job == j.id) {
      reply_.error(it->routing, it->req, wire::ErrorCode::NOT_FOUND, "job " + j.id + " ended");
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  if (j.runs_here && status) {
    try {
      save_job(j);
    } catch (const std::exception& e) {
      spdlog::error("saving job {}: {}", j.id, e.what());
    }
  }
  if (status) spdlog::info("job {} ended: {}", j.id, store::name(j.status));
}

void NodeManager::tell_head_job_ended(const std::string& job_id) {
  tell_head([job_id](wire::Envelope::Builder env) { env.getBody().setFinishJob(job_id); }, "job " + job_id + " ended");
}

// Jobs whose record says they ended take their workers here with them (the head also says so
// at once; this catches what was missed while it was away).
void NodeManager::check_remote_jobs() {
  for (auto& [id, j] : jobs_) {
    if (j.runs_here || j.ended) continue;
    try {
      auto rec = tables_->job(id);
      if (rec && rec->status == store::JobStatus::kRunning) continue;
      if (!rec) spdlog::warn("job {}: its record is gone from the control store", id);
      j.status = rec ? rec->status : store::JobStatus::kFailed;
    } catch (const std::exception& e) {
      spdlog::error("checking job {}: {}", id, e.what());
      continue;
    }
    end_job(j, j.status, 0);
  }
}

// A job registered at the head, known here from its record in the control store. Its binary is
// fetched from the head by digest (no shared file system is assumed) and kept under this node's
// session directory.
void NodeManager::with_job(const std::string& job_id, std::function<void(Result<Job*>)> k) {
  using R = Result<Job*>;
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) {
    if (it->second.ended) return k(R::fail("job " + job_id + " has ended"));
    if (!it->second.binary.empty()) return k(R::ok(&it->second));
  }
  auto rec = tables_->job(job_id);
  if (!rec) return k(R::fail("no job " + job_id + " in the control store"));
  if (rec->status != store::JobStatus::kRunning) return k(R::fail("job " + job_id + " is " + store::name(rec->status)));
  std::string digest = rec->digest;
  auto make = [this, job_id, f = *rec](const std::string& binary) mutable -> Job* {
    auto& j = jobs_[job_id];
    j.id = job_id;
    j.binary = binary;
    if (!j.runs_here) j.cwd = fs::is_directory(f.cwd) ? f.cwd : o_.session_dir;
    j.entrypoint = f.entrypoint;
    if (j.start == 0) j.start = unix_time();
    spdlog::info("job {} runs workers here: {}", job_id, binary);
    return &j;
  };
  // The head's node shares the head's machine: it runs the program where the driver has it.
  if (o_.head_node && access(rec->binary.c_str(), X_OK) == 0) digest.clear();
  if (digest.empty()) {
    if (access(rec->binary.c_str(), X_OK) != 0)
      return k(R::fail("job " + job_id + "'s program " + rec->binary + " is not on node " + node_id_));
    return k(R::ok(make(rec->binary)));
  }
  std::string path = blobs_.path(digest);
  std::string workdir = rec->workdir;
  // The binary, then the working directory (if the job was submitted with one).
  auto with_workdir = [this, k, make, workdir, job_id](const std::string& binary) mutable {
    if (workdir.empty()) return k(R::ok(make(binary)));
    blobs_.fetch(workdir, [this, k, make, workdir, binary, job_id](const Problem& why) mutable {
      if (why) return k(R::fail("fetching job " + job_id + "'s working directory: " + *why));
      auto dir = blobs_.unpack_workdir(workdir);
      if (!dir) return k(R::fail("job " + job_id + "'s working directory: " + dir.why()));
      Job* j = make(binary);
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

}  // namespace yard::sched
