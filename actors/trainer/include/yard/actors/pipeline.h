// Pipeline model parallelism: one stage of a model split into consecutive stages (one actor, or
// thread, each), running a step's micro-batches in the one-forward-one-backward (1F1B) order.
// Activations go forward and their gradients back through yard::collective's send and receive,
// one one-way group per direction and neighbour, so a stage's sends (on their own threads) never
// wait behind its receives, and every receive is posted ahead of the compute that needs it.
//
// A stage owns neither the model nor the optimizer: the job gives it its part's forward function,
// and the first stage's inputs and the last stage's loss per micro-batch; the parameter gradients
// accumulate in the parameters' .grad as in single-process training with gradient accumulation,
// and the job's optimizer steps them. The split and the schedule are pipeline_plan.h's.
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "yard/actors/pipeline_plan.h"
#include "yard/collective.h"

namespace yard::actors {

// A stage's one-way links to its neighbours; null where there is no neighbour.
struct PipelineLinks {
  std::unique_ptr<collective::Communicator> act_in, act_out;    // activations from the previous, to the next stage
  std::unique_ptr<collective::Communicator> grad_in, grad_out;  // their gradients from the next, to the previous stage

  // Joins the links of stage `stage` of `stages`: the groups are named after base.name and
  // meet as base says (control store, generation, host, key); blocks until the neighbours joined.
  static PipelineLinks join(const collective::GroupSpec& base, int stage, int stages);
  // Leaves the groups (every stage calls it, e.g. at the end of training).
  void destroy();
};

// What a stage computes, for one step. The functions run on the calling thread.
struct StageWork {
  // This stage's part of the model: the first stage gets the micro-batch's input, the others the
  // activation the previous stage sent; returns what goes on (on the last stage, the model output).
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  // First stage: micro-batch m's input.
  std::function<torch::Tensor(int m)> input;
  // Other stages: the shape of the activation micro-batch m brings (float32).
  std::function<std::vector<int64_t>(int m)> input_shape;
  // Last stage: micro-batch m's loss from the model output, weighted so that the micro-batches'
  // losses add up to the step's loss (e.g. mean loss × size ÷ batch).
  std::function<torch::Tensor(int m, const torch::Tensor& output)> loss;
  // Optional: called just before micro-batch m's backward (e.g. to let the last one's gradients be
  // all-reduced across replicas as backward produces them).
  std::function<void(int m)> before_backward;
};

class PipelineStage {
 public:
  // timeout: how long a receive waits for its neighbour (a neighbour that died fails it sooner).
  PipelineStage(int stage, int stages, PipelineLinks links,
                std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }

  // The forward and backward passes of `micro_batches` micro-batches in 1F1B order; gradients
  // accumulate into the parameters' .grad. Returns the sum of the micro-batches' losses on the last
  // stage, 0 on the others. Throws collective::CollectiveError naming the stage when a neighbour
  // fails or dies.
  double train(int micro_batches, const StageWork& w);
  // Forward passes only, without gradients (evaluation): on the last stage, output(m, y) receives
  // micro-batch m's model output.
  void infer(int micro_batches, const StageWork& w, const std::function<void(int m, const torch::Tensor&)>& output);

  // Seconds the last train() or infer() waited for its neighbours (the pipeline's bubble as this
  // stage saw it, and any imbalance between the stages).
  double last_wait_seconds() const { return waited_; }

  // Leaves the groups.
  void destroy();

 private:
  int stage_, stages_;
  PipelineLinks links_;
  std::chrono::milliseconds timeout_;
  double waited_ = 0;
};

}  // namespace yard::actors
