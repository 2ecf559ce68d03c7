// RailwayTrainer: one data-parallel replica of the railway model, as an actor. The driver reaches
// it through these methods only; the model, optimizer, data loader and collective group live in
// its implementation (LibTorch), which the driver does not compile.
#pragma once

#include <memory>

#include "job_types.h"
#include "yard/actors/checkpointer.h"
#include "yard/actors/elastic_group.h"

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
  // An elastic group's trainer (cfg.min_workers >= 1): loads the data and builds the replica,
  // alone, before it joins; returns its node's id.
  std::string prepare(TrainConfig cfg, std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts);
  // Joins the group's generation f (yard::actors::ElasticGroup): state from the most advanced old
  // member over the collective, or from the newest checkpoint when no old member is left.
  yard::actors::ElasticJoined regroup(yard::actors::ElasticForm f);
  // Trains `steps` steps (fewer if the epoch ends first). With `checkpoint`, rank 0 then hands a
  // snapshot to every checkpointer replica and returns without waiting for the writes.
  ChunkStats train_steps(int64_t steps, bool checkpoint);
  // The model on the held-out track.
  EvalStats evaluate();
  // Waits for the last checkpoint write and leaves the group; returns what the hand-over had to
  // redo (see ChunkStats::notes).
  std::vector<std::string> finish();
  int pid();
  // Where the replica stands (its data, schedule and position).
  SetupInfo info();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace railway_train
