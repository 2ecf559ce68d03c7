// Trainer: the optimizer step of one data-parallel replica, for any LibTorch model.
//
// What a trainer actor does every step, in one place: gradients of one or more micro-batches
// (all but the last only accumulate locally: no_sync), averaged over the global batch across the
// replicas by DistributedDataParallel (buckets all-reduced during backward), clipped to a maximum
// norm, then an AdamW or SGD step at the rate LrSchedule gives for this step (linear scaling with
// the global batch, warm-up, decay). The replicas start identical (broadcast from rank 0).
// With TrainerOptions::sync_every the replicas instead step alone and average every H steps.
//
// The model and the loss stay the job's: step() calls back for each micro-batch's mean loss.
// Without a communicator it is a single replica (the same arithmetic, no communication).
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yard/actors/ddp.h"
#include "yard/actors/local_sgd.h"
#include "yard/actors/schedule.h"

namespace yard::actors {

struct TrainerOptions {
  std::string optimizer = "adamw";  // or "sgd"
  double weight_decay = 1e-4;
  double momentum = 0.9;            // sgd
  double clip = 1.0;                // maximum gradient norm; 0: no clipping
  LrSchedule schedule;
  DdpOptions ddp;
  // 0: DistributedDataParallel (gradients all-reduced every step). H >= 1: periodic averaging
  // (local SGD, local_sgd.h): each replica steps alone and the replicas average every H steps.
  int sync_every = 0;
};

// Makes this process keep memory it frees (glibc: large blocks are no longer mapped and unmapped
// one by one, and the heap is not trimmed below 1 GiB), so every step stops paying page faults
// for its large activation and gradient tensors: CPU steps get faster and steadier (about 5 % on
// the railway model here). Process-wide; trainer processes call it once at start.
void keep_freed_memory();

// The optimizer TrainerOptions names (adamw or sgd, with its weight decay and momentum) over
// `params`, at the schedule's base rate. Throws std::invalid_argument for an unknown optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> params, const TrainerOptions& o);

class Trainer {
 public:
  // comm may be null (a single replica). Throws std::invalid_argument for an unknown optimizer.
  Trainer(std::shared_ptr<torch::nn::Module> model, collective::Communicator* comm, TrainerOptions o);
  ~Trainer();

  // One optimizer step over micro-batches of `sizes[i]` samples: loss_of(i) runs micro-batch i's
  // forward pass and returns its mean loss (it is not called for an empty one). Returns the sum
  // over this rank's micro-batches of mean loss × size.
  double step(const std::vector<int64_t>& sizes, const std::function<torch::Tensor(size_t)>& loss_of);

  // Brings the replicas together now if they may differ (local SGD between averages); nothing for
  // DDP. A collective: every replica calls it at the same step (before a checkpoint or an
  // evaluation).
  void synchronize();

  int64_t global_step() const { return step_; }
  void set_global_step(int64_t s) { step_ = s; }  // after restoring a checkpoint
  double last_lr() const { return lr_; }
  torch::optim::Optimizer& optimizer() { return *opt_; }
  const LrSchedule& schedule() const { return o_.schedule; }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  TrainerOptions o_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<PeriodicAveraging> avg_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  int64_t step_ = 0;
  double lr_ = 0;
};

}  // namespace yard::actors
