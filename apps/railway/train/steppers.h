// How a trainer replica takes its optimizer steps, one implementation per strategy: data parallel
// through yard::actors::Trainer (ddp, local-sgd), or through parameter servers (ps). Trainer
// processes only (LibTorch).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job_types.h"
#include "yard/actors/checkpointer.h"
#include "yard/collective.h"

namespace railway_train {

class Stepper {
 public:
  virtual ~Stepper() = default;
  // After set-up: continues from `from` when resuming (the model is already loaded from it).
  virtual void begin(const std::optional<yard::actors::CheckpointData>& from) = 0;
  // One step over micro-batches (loss_of(i): micro-batch i's mean loss); the loss summed over
  // samples.
  virtual double step(const std::vector<int64_t>& sizes, const std::function<torch::Tensor(size_t)>& loss_of) = 0;
  virtual double last_lr() const = 0;
  virtual int64_t global_step() const = 0;
  // Replicas made identical now (before a checkpoint or an evaluation) where they may differ.
  virtual void synchronize() {}
  // Rank 0 at a checkpoint, on the training thread: what the checkpoint holds beyond the model and
  // the data loader, taken now; the returned function writes it into the checkpoint later (it may
  // run on another thread).
  virtual std::function<void(yard::actors::CheckpointData&)> checkpoint_parts() = 0;
  // The schedule's description kept with every checkpoint.
  virtual std::string schedule_note() const = 0;
  // What the last step's gradients missed (parameter servers; -1 for the others): the steps this
  // replica was ahead of the slowest when it began it, and the updates other replicas applied
  // between its pull and its push.
  struct Staleness {
    int64_t ahead = -1, stale_updates = -1;
  };
  virtual Staleness last_staleness() const { return {}; }
  // Processes the strategy started beside the trainers (parameter servers), for the progress report.
  virtual std::vector<int> helper_pids() { return {}; }
  virtual void finish() {}
};

// The stepper the configuration asks for. comm: this rank's group (data parallel strategies).
// generation: the group's (the names of what the stepper starts carry it).
std::unique_ptr<Stepper> make_stepper(const TrainConfig& cfg, int rank, int world, const std::string& generation,
                                      int64_t steps_per_epoch, std::shared_ptr<torch::nn::Module> model,
                                      yard::collective::Communicator* comm);

}  // namespace railway_train
