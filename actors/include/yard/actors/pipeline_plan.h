// Pipeline model parallelism, the pure parts: how a model's layers split into stages, the order in
// which a stage runs its micro-batches (one forward, one backward: 1F1B), how a batch splits into
// micro-batches, and what a pipeline can gain at best. No LibTorch, no processes: the job's driver
// checks a split with these before any actor starts; yard/actors/pipeline.h runs the stages.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace yard::actors {

// An impossible pipeline (more stages than layers, fewer micro-batches than stages, a batch too
// small for its micro-batches); what() says which and why.
class PipelineError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Units [first, end) of the model's sequence of units (layers) that one stage runs.
struct StageSpan {
  int first = 0, end = 0;
  int size() const { return end - first; }
  bool operator==(const StageSpan&) const = default;
};

// Splits units with the measured costs `unit_costs` (e.g. a layer's forward and backward time, in
// model order) into `stages` consecutive, non-empty spans so that the costliest stage costs as
// little as possible; a unit is never split. Among equally good splits, later stages get fewer units.
// Throws PipelineError when stages < 1, stages > units, or a cost is negative or not finite.
std::vector<StageSpan> plan_stages(const std::vector<double>& unit_costs, int stages);

// Refuses a pipeline that cannot run, with the reason: stages < 1, more stages than units (a unit,
// e.g. an attention block, stays whole), micro_batches < stages (the pipeline would never fill),
// or a batch of fewer samples than micro-batches.
void check_pipeline(int units, int stages, int micro_batches, int64_t batch);

enum class PipeOp { kForward, kBackward };
struct PipeStep {
  PipeOp op;
  int micro;
  bool operator==(const PipeStep&) const = default;
};

// The order in which stage `stage` of `stages` runs the forward and backward passes of
// `micro_batches` micro-batches under 1F1B: stages - stage - 1 forwards to fill the pipeline, then
// one forward and one backward in turn, then the remaining backwards. Every micro-batch's forward
// comes before its backward, and a stage holds the activations of at most stages - stage
// micro-batches at once.
std::vector<PipeStep> one_f_one_b(int stage, int stages, int micro_batches);

// A batch of `batch` samples as `micro_batches` micro-batches, as even as they come (the first ones
// one larger when it does not divide). Throws PipelineError when batch < micro_batches or
// micro_batches < 1.
std::vector<int64_t> micro_batch_sizes(int64_t batch, int micro_batches);

// The best speed-up over one process that a balanced pipeline of `stages` stages can reach with
// `micro_batches` micro-batches under 1F1B: stages / (1 + (stages - 1) / micro_batches) (the
// rest is the bubble while the pipeline fills and drains).
double ideal_pipeline_speedup(int stages, int micro_batches);

}  // namespace yard::actors
