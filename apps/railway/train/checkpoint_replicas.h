// The job's checkpoints kept by several Checkpointer actors at once (--checkpoint-replicas,
// default 2): the first beside the driver, in the run directory; the others spread over the nodes
// (each on the node with the fewest actors), in <run>/replica-<i>. Rank 0 hands
// every checkpoint to each; a restore takes the newest one any replica can verify. So the loss
// of a node — its disk with it — loses no checkpoint while another replica lives. A lost
// replica restarts (max_restarts) and is handed the checkpoints that follow.
#pragma once

#include <string>
#include <vector>

#include "recovery.h"
#include "yard/actors/checkpointer.h"

namespace railway_train {

using Checkpointers = std::vector<yard::ActorHandle<yard::actors::Checkpointer>>;

class CheckpointReplicas {
 public:
  // Starts `n` replicas of the run's checkpointer and prints where each one writes.
  CheckpointReplicas(const std::string& run_dir, const std::string& run, int64_t keep, int n);
  const Checkpointers& handles() const { return handles_; }
  // A replica whose process changed since the last look was lost: reported once. Notes from
  // rank 0's hand-over (a write handed again) are reported when no loss was reported for them yet.
  void check(const RecoveryReport& report);
  void handed_again(const std::vector<std::string>& notes, const RecoveryReport& report);
  // The newest step any replica has completed (-1: none); a replica that does not answer within
  // `patience` is passed over.
  int64_t latest_step(yard::Duration patience = std::chrono::seconds(60)) const;
  // What the replicas passed over when restoring (corrupt or partial files), once each.
  std::vector<std::string> skipped() const;
  void stop();

 private:
  Checkpointers handles_;
  std::vector<std::string> dirs_;
  std::vector<int> pids_;
  int losses_seen_ = 0;  // losses reported before rank 0 says what it handed again
};

}  // namespace railway_train
