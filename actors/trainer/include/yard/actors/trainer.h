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

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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

// Makes this process keep memory it frees for reuse (Switchyard's heap, jemalloc, does by default;
// this holds even under YARD_MALLOC_RETAIN=0), so every step stops paying page faults for its
// large activation and gradient tensors: CPU steps get faster and steadier (about 5 % on the
// railway model here). Process-wide; trainer processes call it once at start.
void keep_freed_memory();

// The optimizer TrainerOptions names (adamw or sgd, with its weight decay and momentum) over
// `params`, at the schedule's base rate. Throws std::invalid_argument for an unknown optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> params, const TrainerOptions& o);

// What a member brings to Trainer::regroup, and what it learns there.
struct Regroup {
  bool has_state = true;        // false: a replica new to the group (its state is replaced)
  int64_t global_batch = 0;     // the new generation's global batch (0: unchanged)
  // Where the cosine decay now ends, from the step and job state the group goes on from (the
  // run's remaining samples at the new batch); null: unchanged.
  std::function<int64_t(int64_t step, const std::string& extra)> total_steps;
  int64_t resize_warmup = 0;    // steps over which the rate moves to the new batch's
  std::string extra;            // in: this member's job state (its data position); out: the source's
  // Every member calls it when no member has state (all new, or every old one lost): it loads the
  // job's newest checkpoint into the model and optimizer (the same on every member) and returns
  // its step and job state, or nullopt when there is none (a fresh start). Null: a fresh start.
  std::function<std::optional<std::pair<int64_t, std::string>>()> restore;
};
struct Regrouped {
  int source = -1;          // the rank whose state every member now has
  int64_t step = 0;         // the global step the group goes on from
  bool loaded = false;      // this member's state was replaced (it was new, or behind)
  bool from_disk = false;   // no member had state: restore() was used
  size_t bytes = 0;         // the state sent over the collective
};
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

  // Elastic groups: this replica goes on in a new generation of the group, `comm` (every member
  // of it calls regroup together, new ones with a freshly made Trainer). Afterwards every member
  // has the model, optimizer, step and learning-rate history of the most advanced old member
  // (the lowest rank among them), sent over `comm` from that member's memory, and its job state
  // (r.extra); the rate then moves to the linear-scaling rate of r.global_batch over
  // r.resize_warmup steps. A checkpoint is read (r.restore) only when no member has state.
  // Survivors of a lost member are at the last step they completed: a step that fails on a
  // collective changes no parameter. Data parallel only (not with sync_every).
  Regrouped regroup(collective::Communicator& comm, Regroup& r);

  // Where this rank's busy time for the next step starts: call it before fetching the step's
  // batch, so the fetch counts; without it the time starts when step() is called. A step's busy
  // time is from there to the all-reduce's wait, plus the previous step's clipping and optimizer
  // step; its rate is the rank's samples over that, sent with the next step's gradients.
  void begin_busy() { busy_from_ = std::chrono::steady_clock::now(); }
  // This rank's last step: busy seconds, and seconds waiting for the all-reduces.
  double last_busy_s() const { return busy_s_; }
  double last_wait_s() const { return ddp_ ? ddp_->last_wait_s() : 0.0; }
  // Every rank's rate as it sent it with the last step (each one measured the step before; by
  // rank, the same on every rank; empty without a group). For batch shares by speed
  // (yard/actors/shares.h).
  std::vector<double> group_rates() const { return ddp_ ? ddp_->rates() : std::vector<double>{}; }

  int64_t global_step() const { return step_; }
  void set_global_step(int64_t s) { step_ = s; }  // after restoring a checkpoint
  double last_lr() const { return lr_; }
  torch::optim::Optimizer& optimizer() { return *opt_; }
  const LrSchedule& schedule() const { return o_.schedule; }
  // The rate's history: the schedule and every change of the global batch.
  const ElasticLr& rate() const { return lr_sched_; }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  TrainerOptions o_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<PeriodicAveraging> avg_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  ElasticLr lr_sched_;
  int64_t step_ = 0;
  double lr_ = 0;
  std::optional<std::chrono::steady_clock::time_point> busy_from_;
  double busy_s_ = 0, tail_s_ = 0, rate_ = 0;
};

}  // namespace yard::actors
