#include "node/worker_pool.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "yard/internal/node_objects.h"
#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

void WorkerPool::configure(std::map<std::string, std::string> env, std::string log_dir, bool node_has_gpus) {
  env_ = std::move(env);
  log_dir_ = std::move(log_dir);
  gpus_ = node_has_gpus;
}

std::string WorkerPool::start(const Launch& l) {
  Worker w;
  w.id = "worker-" + sys::random_hex(5);
  w.job_id = l.job_id;
  w.actor_id = l.actor_id;
  w.lease = l.lease;
  w.runtime_env = l.runtime_env;
  w.log = log_dir_ + "/" + w.id + ".log";
  sys::SpawnOptions so;
  so.env = env_;
  so.env.insert({{"YARD_WORKER", "1"}, {"YARD_JOB_ID", l.job_id}, {"YARD_WORKER_ID", w.id}, {"YARD_ACTOR_ID", l.actor_id}, {"YARD_NAMESPACE", l.name_space},
                 {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"},
                 {"YARD_ACTOR_RESTARTS", std::to_string(l.restarts)}});
  // A worker sees exactly the devices it was given (none: an empty list hides them all).
  std::string visible;
  for (auto& [dev, share] : l.gpus) visible += (visible.empty() ? "" : ",") + std::to_string(dev);
  if (gpus_ || !l.gpus.empty()) so.env["CUDA_VISIBLE_DEVICES"] = visible;
  for (auto& [k, v] : l.env)
    if (k.rfind("YARD_", 0) != 0) so.env[k] = v;
  w.gpus = l.gpus;
  so.cwd = l.cwd;
  so.stdout_path = w.log;
  so.death_signal = SIGKILL;
  w.pid = sys::spawn({l.binary}, so);
  by_pid_[w.pid] = w.id;
  spdlog::info("started {} (pid {}) for job {}{}", w.id, w.pid, l.job_id, l.actor_id.empty() ? "" : " actor " + l.actor_id);
  std::string id = w.id;
  workers_.emplace(id, std::move(w));
  return id;
}

WorkerPool::Worker* WorkerPool::find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

WorkerPool::Worker* WorkerPool::idle_of(const std::string& job, const std::string& runtime_env) {
  for (auto& [id, w] : workers_)
    if (w.state == State::kIdle && w.job_id == job && w.runtime_env == runtime_env) return &w;
  return nullptr;
}

int WorkerPool::task_workers_of(const std::string& job) const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [&](auto& kv) {
    return kv.second.job_id == job && kv.second.actor_id.empty();
  }));
}

long WorkerPool::leased() const {
  return std::count_if(workers_.begin(), workers_.end(), [](auto& kv) { return kv.second.state == State::kLeased; });
}

std::map<std::string, Res> WorkerPool::leased_by_job() const {
  std::map<std::string, Res> out;
  for (auto& [id, w] : workers_) {
    bool for_lease = w.state == State::kLeased || (w.state == State::kStarting && w.lease != 0);
    if (for_lease && w.actor_id.empty() && w.bundle.empty() && !w.held.empty()) add(out[w.job_id], w.held);
  }
  return out;
}

std::map<std::string, int> WorkerPool::by_state() const {
  static const char* names[] = {"starting", "idle", "leased", "actor"};
  std::map<std::string, int> n;
  for (auto* name : names) n[name] = 0;
  for (auto& [id, w] : workers_) ++n[names[static_cast<int>(w.state)]];
  return n;
}

std::vector<pid_t> WorkerPool::pids() const {
  std::vector<pid_t> out;
  for (auto& [id, w] : workers_) out.push_back(w.pid);
  return out;
}

std::optional<WorkerPool::Worker> WorkerPool::exited(pid_t pid) {
  auto p = by_pid_.find(pid);
  if (p == by_pid_.end()) return std::nullopt;
  auto w = workers_.find(p->second);
  by_pid_.erase(p);
  remove_segments(pid);
  if (w == workers_.end()) return std::nullopt;
  Worker gone = std::move(w->second);
  workers_.erase(w);
  return gone;
}

void WorkerPool::stop_pid(pid_t pid) {
  if (stopping_.count(pid)) return;
  ::kill(pid, SIGTERM);
  stopping_[pid] = std::chrono::steady_clock::now() + std::chrono::seconds(1);
}

void WorkerPool::stop(const std::string& id) {
  if (auto* w = find(id)) stop_pid(w->pid);
}

void WorkerPool::stop_job(const std::string& job) {
  for (auto& [id, w] : workers_)
    if (w.job_id == job && !w.detached) stop_pid(w.pid);
}

void WorkerPool::stop_all() {
  for (auto& [id, w] : workers_) stop_pid(w.pid);
}

void WorkerPool::enforce_stops(std::chrono::steady_clock::time_point now) {
  for (auto it = stopping_.begin(); it != stopping_.end();) {
    if (!by_pid_.count(it->first)) {  // gone (reaped)
      it = stopping_.erase(it);
      continue;
    }
    if (now >= it->second) ::kill(it->first, SIGKILL);
    ++it;
  }
}

void WorkerPool::kill_all() {
  for (auto& [id, w] : workers_) ::kill(w.pid, SIGKILL);
}

bool WorkerPool::any_alive() const {
  return std::any_of(workers_.begin(), workers_.end(), [](auto& kv) { return sys::pid_alive(kv.second.pid); });
}

void WorkerPool::remove_segments() const {
  for (auto& [id, w] : workers_) remove_segments(w.pid);
}

void WorkerPool::remove_segments(pid_t pid) { detail::ShmPool::remove_segments_of(pid); }

}  // namespace yard::sched
