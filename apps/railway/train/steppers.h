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
#include "yard/railway/model.h"
#include "yard/actors/checkpointer.h"
#include "yard/actors/schedule.h"
#include "yard/actors/trainer.h"
#include "yard/collective.h"

namespace railway_train {

// One optimizer step's data on this replica: the data loader's batches (several with --accumulate).
struct StepBatches {
  std::vector<int64_t> sizes;                     // samples of each
  std::function<torch::Tensor(size_t)> loss_of;   // the whole model's mean loss on batch i
  std::function<torch::Tensor(size_t)> input_of;  // batch i's input, (N, T, F)
  // The share of batch i's mean loss that its rows [first, first + n) carry, from the model's
  // output on them (the shares of a batch's parts add up to its mean loss).
  std::function<torch::Tensor(size_t i, int64_t first, int64_t n, const RailwayOut&)> loss_on;
};

// Builds the railway model under the job's seed: `layers` encoder layers, of which those in
// [first, end) are kept (RailwayNetImpl's keep range).
using ModelMaker = std::function<RailwayNet(int64_t layers, int first, int end)>;

class Stepper {
 public:
  virtual ~Stepper() = default;
  // After set-up: continues from `from` when resuming (the model is already loaded from it).
  virtual void begin(const std::optional<yard::actors::CheckpointData>& from) = 0;
  // One step over the batches; the loss summed over this replica's samples (0 on a pipeline stage
  // that does not compute it).
  virtual double step(const StepBatches& b) = 0;
  // Whether this rank reports the step's loss and samples (not a pipeline stage before the last).
  virtual bool reports_loss() const { return true; }
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
  // Those of them that restarted in place since the last call, each once (rank 0 reports them).
  virtual std::vector<HelperRestart> helper_restarts() { return {}; }
  // Pipeline: the encoder layers each stage runs.
  virtual std::vector<int> stage_layers() const { return {}; }
  // The model this stepper built for itself (a pipeline stage: its part); null: the trainer's.
  virtual RailwayNet own_model() const { return RailwayNet(nullptr); }
  // The model's outputs on x where the stepper computes them (a pipeline: every stage of the first
  // replica calls it, and stage 0 gets them; the others get nullopt). nullopt by default: the
  // trainer's own model computes them.
  virtual std::optional<RailwayOut> outputs(const torch::Tensor& x) {
    (void)x;
    return std::nullopt;
  }
  virtual void finish() {}
  // Batch shares by speed (data parallel; the others measure nothing): the step's busy time
  // starts now (before its batch is fetched), and what the last step measured.
  struct Busy {
    double busy_s = 0, wait_s = 0;
    std::vector<double> group_rates;  // every rank's rate, by rank (yard::actors::Trainer::group_rates)
  };
  virtual void begin_busy() {}
  virtual std::optional<Busy> last_busy() const { return std::nullopt; }
  // An elastic group's next generation (yard::actors::Trainer::regroup); data parallel only.
  virtual yard::actors::Regrouped regroup(yard::collective::Communicator& comm, yard::actors::Regroup& r);
};

// The job's learning-rate schedule for a global batch, and its description kept with checkpoints.
yard::actors::LrSchedule schedule_of(const TrainConfig& cfg, int64_t global_batch, int64_t total_steps, int64_t warmup);
std::string note_of(const TrainConfig& cfg, const yard::actors::LrSchedule& s);

// The stepper the configuration asks for. model: the whole model (null for a pipeline, whose
// stage builds its part with `make`). comm: this rank's group (data parallel strategies).
// generation: the group's (the names of what the stepper starts carry it). ckpts: the job's
// checkpointers (a restarted parameter server takes its shard back from them).
std::unique_ptr<Stepper> make_stepper(const TrainConfig& cfg, int rank, int world, const std::string& generation,
                                      int64_t steps_per_epoch, RailwayNet model, const ModelMaker& make,
                                      yard::collective::Communicator* comm,
                                      const std::vector<yard::ActorHandle<yard::actors::Checkpointer>>& ckpts);
// The pipeline split a checkpoint keeps (encoder layers per stage; empty: none).
std::vector<int> pipeline_split_of(const yard::actors::CheckpointData& c);
// pipeline: this rank's stage of its replica's pipeline (pipeline_stepper.cc).
std::unique_ptr<Stepper> make_pipeline_stepper(const TrainConfig& cfg, const Layout& at, const std::string& generation,
                                               int64_t steps_per_epoch, const ModelMaker& make);

}  // namespace railway_train
