#include "node/node_manager.h"

#include <signal.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched {

using namespace detail;

std::string NodeManager::spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                                 uint32_t restarts, const Devices& gpus) {
  auto& j = jobs_.at(job_id);
  Worker w;
  w.id = "worker-" + random_hex(5);
  w.job_id = job_id;
  w.actor_id = actor_id;
  w.lease = lease;
  w.log = log_dir_ + "/" + w.id + ".log";
  SpawnOptions so;
  so.env = {{"YARD_WORKER", "1"}, {"YARD_NODE_ADDRESS", io_->address()}, {"YARD_TOKEN", token_},
            {"YARD_JOB_ID", job_id}, {"YARD_WORKER_ID", w.id}, {"YARD_ACTOR_ID", actor_id},
            {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"YARD_NODE_ID", node_id_},
            {"YARD_HEAD_ADDRESS", o_.join_address},
            {"YARD_ACTOR_RESTARTS", std::to_string(restarts)}, {"YARD_NODE_HOST", o_.host}};
  // A worker sees exactly the devices it was given (none: an empty list hides them all).
  std::string visible;
  for (auto& [dev, share] : gpus) visible += (visible.empty() ? "" : ",") + std::to_string(dev);
  if (gpus_.devices() > 0 || !gpus.empty()) so.env["CUDA_VISIBLE_DEVICES"] = visible;
  w.gpus = gpus;
  so.cwd = j.cwd;
  so.stdout_path = w.log;
  so.death_signal = SIGKILL;
  w.pid = spawn({j.binary}, so);
  worker_by_pid_[w.pid] = w.id;
  spdlog::info("started {} (pid {}) for job {}{}", w.id, w.pid, job_id, actor_id.empty() ? "" : " actor " + actor_id);
  std::string id = w.id;
  workers_.emplace(id, std::move(w));
  return id;
}

void NodeManager::on_register_worker(Incoming& in) {
  auto rw = in.msg->env().getBody().getRegisterWorker();
  auto it = workers_.find(rw.getWorkerId());
  if (it == workers_.end()) {
    reply_.error(in, wire::ErrorCode::NOT_FOUND, "unknown worker id");
    return;
  }
  auto& w = it->second;
  w.address = rw.getAddress();
  reply_.ok(in);
  if (!w.actor_id.empty()) {
    if (!hosted_.count(w.actor_id)) {
      kill(w.pid, SIGKILL);
      return;
    }
    instantiate_hosted(w.actor_id, w);
    return;
  }
  if (w.lease) {
    auto l = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& x) { return x.seq == w.lease; });
    w.lease = 0;
    if (l != leases_.end()) {
      w.state = WState::kLeased;
      l->assigned.push_back(w.id);
      --l->starting;
      if (l->starting == 0) {
        answer_lease(*l);
        leases_.erase(l);
      }
      return;
    }
    give_held(w);
    w.held.clear();
  }
  w.state = WState::kIdle;
  process_leases();
}

// The head registered a job whose driver leases from this node: its first workers start while
// the driver gets going.
void NodeManager::on_warm_pool(Incoming& in) {
  auto wp = in.msg->env().getBody().getWarmPool();
  std::string job = wp.getJobId();
  int want = std::min<int>(static_cast<int>(wp.getCount()), static_cast<int>(total_["CPU"]));
  reply_.ok(in);
  with_job(job, [this, job, want](Result<Job*> j) {
    if (!j) return;
    int have = static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [&](auto& kv) {
      return kv.second.job_id == job && kv.second.actor_id.empty();
    }));
    for (int i = have; i < want; ++i) {
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
