// Synchronous data parallelism over a yard::collective group, as PyTorch's DDP does it:
//  * identical replicas: parameters and buffers broadcast from rank 0 at the start;
//  * gradients grouped into buckets (about 25 MiB, in reverse registration order, which is
//    roughly the order backward produces them) and all-reduced as soon as a bucket's last
//    gradient is ready, on the communicator's background thread, overlapping with the rest of
//    backward; buckets are launched strictly in bucket order so every rank issues the same
//    sequence of collectives;
//  * the average is over the global batch, weighted by each rank's batch size, so uneven last
//    batches of an epoch still give the full-batch gradient;
//  * no_sync() for gradient accumulation: the micro-batches in it only accumulate locally;
//  * each rank's measured throughput travels in the first bucket too (rates(), for batch shares
//    by speed, yard/actors/shares.h): no message of its own.
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "yard/collective.h"

namespace yard::actors {

struct DdpOptions {
  size_t bucket_bytes = 25u << 20;
  bool overlap = true;  // false: all-reduce after backward (a reference for tests and benches)
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> model, collective::Communicator& comm, DdpOptions o = {});
  ~DistributedDataParallel();

  // Makes every replica identical to root's.
  void broadcast_state(int root = 0);
  // Goes on in another group (an elastic group's next generation): what the last step left
  // pending is dropped (a step that failed when a peer was lost changed no parameter).
  void rebind(collective::Communicator& comm);
  // Before backward: this rank's batch size for the step and its measured rate (samples per busy
  // second, 0 when not measured), both travelling with the gradients.
  void begin_step(int64_t local_batch, double rate = 0);
  // After backward: waits for the buckets and leaves the global-batch average in every .grad().
  // Throws when every rank's batch was empty.
  void finish_step();
  // While set, backward only accumulates locally (no communication).
  void set_no_sync(bool on) { no_sync_ = on; }
  size_t buckets() const { return buckets_.size(); }
  // The global batch of the last finished step.
  int64_t global_batch() const { return global_batch_; }
  // Every rank's rate as given to begin_step in the last finished step, by rank (the same on every rank).
  const std::vector<double>& rates() const { return rates_; }
  // Seconds the last finish_step waited for the all-reduces (communication and slower ranks).
  double last_wait_s() const { return wait_s_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    int64_t size = 0;             // elements of its parameters
    torch::Tensor flat;
    size_t ready = 0;
    collective::WorkPtr work;
  };
  void on_grad(size_t param, const torch::Tensor& g);
  // Writes parameter k's gradient for this step, times the local batch size, into its bucket.
  void fill_slot(size_t k, const torch::Tensor& g);
  void launch_ready();
  void drain();  // waits for pending buckets, ignoring their errors
  // The first bucket's tensor: its gradients, the batch size, and one rate slot per rank.
  void size_first_bucket();

  std::shared_ptr<torch::nn::Module> model_;
  collective::Communicator* comm_;
  DdpOptions o_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;  // where each parameter starts in its bucket
  std::vector<bool> seen_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool no_sync_ = false;
  bool in_step_ = false;
  double scale_ = 1.0;          // this step's local batch size
  int64_t count_at_ = 0;        // where in the first bucket the batch sizes are summed
  int64_t global_batch_ = 0;
  std::vector<double> rates_;
  double wait_s_ = 0;
};

// The learning rate by the linear scaling rule with gradual warm-up (Goyal et al.): the base rate
// is for base_batch; a global batch k times larger gets k times the rate, reached linearly over
// warmup_steps from the base rate. Never divided by the number of workers.
double scaled_lr(double base_lr, int64_t base_batch, int64_t global_batch, int64_t step, int64_t warmup_steps);

}  // namespace yard::actors
