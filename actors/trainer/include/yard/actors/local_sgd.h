// Periodic model averaging (local SGD): each replica trains on its own shard with its own
// optimizer and no communication in its steps; every `every` steps the replicas average their
// parameters and floating-point buffers, each weighted by the samples it trained on since the
// last average. The synchronisation cost falls by `every` against DDP's per-step allreduce.
// With every = 1 and plain SGD (no momentum) a step is exactly DDP's: the weighted mean of the
// replicas' w - lr * g_i is w - lr * (global-batch mean gradient), uneven shards included.
// Optimizer state (momentum, Adam's moments) stays local, as in Lin et al.'s local SGD.
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "yard/collective.h"

namespace yard::actors {

class PeriodicAveraging {
 public:
  // every >= 1; throws std::invalid_argument otherwise.
  PeriodicAveraging(std::shared_ptr<torch::nn::Module> model, collective::Communicator& comm, int every);

  // Makes every replica identical to root's (before training, or after a replica was replaced).
  void broadcast_state(int root = 0);
  // After this replica's optimizer step on local_batch samples: every `every` steps, averages the
  // replicas (a collective: every rank calls it for every step). True when it averaged.
  bool step_done(int64_t local_batch);
  // Averages now, whatever the step count (at the end of an epoch or of training).
  void average();
  int every() const { return every_; }
  int64_t steps() const { return steps_; }

 private:
  std::vector<torch::Tensor> state() const;  // parameters and floating-point buffers, in order

  std::shared_ptr<torch::nn::Module> model_;
  collective::Communicator& comm_;
  int every_;
  int64_t steps_ = 0;
  int64_t samples_since_ = 0;  // this replica's samples since the last average
};

}  // namespace yard::actors
