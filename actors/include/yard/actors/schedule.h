// The learning-rate schedule of data-parallel training.
//
// Linear scaling (Goyal et al.): the base rate is meant for base_batch samples per step; a global
// batch k times larger gets k times the rate — never divided by the number of workers. The
// scaled rate is reached by a linear warm-up from the base rate over warmup_steps, then held
// (kConstant) or decayed along a half cosine to final_fraction of it at total_steps (kCosine),
// so runs with different worker counts end the same number of epochs equally annealed.
//
// The schedule is a pure function of the step: a checkpoint's step restores it exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::actors {

struct LrSchedule {
  enum class Decay { kConstant, kCosine };
  double base_lr = 1e-3;
  int64_t base_batch = 32;
  int64_t global_batch = 32;
  int64_t warmup_steps = 0;
  Decay decay = Decay::kConstant;
  int64_t total_steps = 0;      // kCosine: where the decay ends
  double final_fraction = 0.0;  // kCosine: the rate at total_steps, as a fraction of the peak

  // The rate after warm-up: base_lr · global_batch / base_batch.
  double peak() const;
  // The rate for an optimizer step (0-based).
  double at(int64_t step) const;
  // "constant" or "cosine"; parse() throws std::invalid_argument naming the value otherwise.
  static Decay parse(const std::string& name);
};

// The rate of an elastic group, whose global batch changes when replicas join or leave. Each
// change follows the linear scaling rule for the new global batch (the base schedule with that
// batch), reached over `resize_warmup` steps by blending from the rate the previous batch would
// have had: never a jump, never divided by the number of workers.
struct ElasticLr {
  LrSchedule base;         // its global_batch is the first one
  int64_t resize_warmup = 0;
  struct Change {
    int64_t step;          // the first step with the new global batch
    int64_t global_batch;
    int64_t total_steps = 0;  // where the decay now ends (the run's steps at the new batch); 0: unchanged
  };
  std::vector<Change> changes;  // in step order

  // Records a change (steps in order; a change at the same step as the last replaces it).
  void resize(int64_t step, int64_t global_batch, int64_t total_steps = 0);
  double at(int64_t step) const;

 private:
  double regime(size_t n, int64_t step) const;  // the rate with the first n changes applied
};

}  // namespace yard::actors
