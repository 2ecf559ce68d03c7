#include "checkpoint_replicas.h"

#include <chrono>
#include <cstdio>

namespace railway_train {

using namespace std::chrono_literals;
using yard::actors::Checkpointer;

CheckpointReplicas::CheckpointReplicas(const std::string& run_dir, const std::string& run, int64_t keep, int n) {
  for (int i = 0; i < n; ++i) {
    std::string dir = i == 0 ? run_dir : run_dir + "/replica-" + std::to_string(i);
    std::string name = "railway-" + run + (i == 0 ? "" : "-replica-" + std::to_string(i));
    // The first beside the driver (where --out is), the others one at a time on the nodes with the
    // fewest actors, each placed knowing where the ones before it are.
    auto make = yard::actor<Checkpointer>(dir, keep, name).max_restarts(-1);
    handles_.push_back(i == 0 ? make.node_affinity(yard::node_id(), true).remote() : make.spread().remote());
    pids_.push_back(ask(handles_.back(), &Checkpointer::pid));
    dirs_.push_back(dir);
    std::printf("checkpoints in %s on %s, written by checkpointer pid %d\n", dir.c_str(),
                ask(handles_.back(), &Checkpointer::node).c_str(), pids_.back());
  }
  std::fflush(stdout);
}

void CheckpointReplicas::check(const RecoveryReport& report) {
  for (size_t i = 0; i < handles_.size(); ++i) {
    int pid = ask(handles_[i], &Checkpointer::pid);
    if (pid == pids_[i]) continue;
    Recovery r;
    r.phase = Phase::kCheckpoint;
    r.lost = "checkpointer replica " + std::to_string(i) + " (pid " + std::to_string(pids_[i]) + ")";
    r.error = "its process died";
    r.redone = "restarted as pid " + std::to_string(pid) + " on " + ask(handles_[i], &Checkpointer::node) +
               "; a write it had in hand is handed to it again";
    pids_[i] = pid;
    ++losses_seen_;
    report(r);
  }
}

void CheckpointReplicas::handed_again(const std::vector<std::string>& notes, const RecoveryReport& report) {
  for (auto& n : notes) {
    if (losses_seen_ > 0) {  // the loss is reported already: only what it cost
      --losses_seen_;
      std::printf("  %s\n", n.c_str());
      continue;
    }
    Recovery r;
    r.phase = Phase::kCheckpoint;
    r.lost = "a checkpointer replica";
    r.error = "its process died while it wrote";
    r.redone = n;
    for (size_t i = 0; i < handles_.size(); ++i) pids_[i] = ask(handles_[i], &Checkpointer::pid);
    report(r);
  }
}

int64_t CheckpointReplicas::latest_step(yard::Duration patience) const {
  int64_t best = -1;
  for (auto& h : handles_) {
    try {
      best = std::max(best, *h.call(&Checkpointer::latest_step).remote().get(patience));
    } catch (const yard::Error&) {
    }
  }
  return best;
}

std::vector<std::string> CheckpointReplicas::skipped() const {
  std::vector<std::string> out;
  for (auto& h : handles_) {
    try {
      auto skipped = *h.call(&Checkpointer::skipped).remote().get(60s);
      out.insert(out.end(), skipped.begin(), skipped.end());
    } catch (const yard::Error&) {
    }
  }
  return out;
}

void CheckpointReplicas::stop() {
  for (auto& h : handles_) {
    try {
      yard::kill(h);
    } catch (const yard::Error&) {
    }
  }
}

}  // namespace railway_train
