// RailwayTrainer: one data-parallel replica of the railway model, as an actor. The driver reaches
// it through these methods only; the model, optimizer, data loader and collective group live in
// its implementation (LibTorch), which the driver does not compile.
#pragma once

#include <memory>

#include "job_types.h"
#include "yard/actors/checkpointer.h"

namespace railway_train {

class RailwayTrainer {
 public:
  RailwayTrainer();
  ~RailwayTrainer();

  // Loads the data, builds the replica, joins the group of this generation, makes the replicas
  // identical; with cfg.resume, continues from the newest checkpoint any of the checkpointer
  // replicas holds complete.
  SetupInfo setup(TrainConfig cfg, int rank, int world, std::string generation,
                  std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts);
  // Trains `steps` steps (fewer if the epoch ends first). With `checkpoint`, rank 0 then hands a
  // snapshot to every checkpointer replica and returns without waiting for the writes.
  ChunkStats train_steps(int64_t steps, bool checkpoint);
  // The model on the held-out track.
  EvalStats evaluate();
  // Waits for the last checkpoint write and leaves the group; returns what the hand-over had to
  // redo (see ChunkStats::notes).
  std::vector<std::string> finish();
  int pid();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace railway_train
