#include "node/node_manager.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "yard/errors.h"
#include "yard/process.h"
#include "yard/runtime_env.h"

namespace yard::sched {

using namespace detail;

std::string NodeManager::spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                                      uint32_t restarts, const Devices& gpus, const std::string& runtime_env) {
  auto* j = jobs_->live(job_id);
  if (!j) throw Error("job " + job_id + " has ended");
  WorkerPool::Launch l{job_id, j->binary, j->cwd, j->ns, actor_id, j->env, lease, restarts, gpus, runtime_env};
  if (!runtime_env.empty()) {
    auto e = RuntimeEnv::from_json(runtime_env);  // checked by its creator already
    for (auto& [k, v] : e.env_vars) l.env[k] = v;
    if (!e.working_dir.empty()) {
      if (!std::filesystem::is_directory(e.working_dir))
        throw Error("its runtime_env's working directory " + e.working_dir + " is not on node " + node_id_);
      l.cwd = e.working_dir;
    }
  }
  return workers_.start(l);
}

void NodeManager::on_register_worker(Incoming& in) {
  auto rw = in.msg->env().getBody().getRegisterWorker();
  auto* found = workers_.find(rw.getWorkerId());
  if (!found) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "unknown worker id");
    return;
  }
  auto& w = *found;
  w.address = rw.getAddress();
  reply_.ok(in);
  if (!w.actor_id.empty()) return hosting_->registered(w);
  if (w.lease) {
    uint64_t lease = w.lease;
    w.lease = 0;
    w.state = WState::kLeased;
    if (leases_->queue().worker_ready(lease, w.id)) return;
    leases_->give_held(w);  // its lease is gone (answered at its deadline)
    w.held.clear();
    w.bundle = {};
  }
  w.state = WState::kIdle;
  leases_->queue().process();
}

// The head registered a job whose driver leases from this node: its first workers start while
// the driver gets going.
void NodeManager::on_warm_pool(Incoming& in) {
  auto wp = in.msg->env().getBody().getWarmPool();
  std::string job = wp.getJobId();
  int want = std::min<int>(static_cast<int>(wp.getCount()), static_cast<int>(res_->total().at("CPU")));
  reply_.ok(in);
  with_job(job, [this, job, want](Result<Job*> j) {
    if (!j) return;
    for (int i = workers_.task_workers_of(job); i < want; ++i) {
      try {
        spawn_worker(job, "", 0);
      } catch (const std::exception& e) {
        spdlog::error("warming the pool for job {}: {}", job, e.what());
        return;
      }
    }
  });
}

}  // namespace yard::sched
