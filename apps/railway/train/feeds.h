// Where a trainer's batches come from, one implementation per kind of group: a fixed group's
// prefetching DataLoader (each rank its stride of every epoch), or an elastic group's share of
// the epoch's next positions, which follows the group's size from step to step (every sample
// still seen exactly once per epoch across all ranks). Trainer processes only (LibTorch).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yard/actors/sampler.h"

namespace railway_train {

struct Batch {
  torch::Tensor x, label, amp, tokens;
};

struct FeedItem {
  std::vector<uint64_t> indices;  // the samples it holds (may be empty at an epoch's end)
  Batch batch;
  bool none = false;         // batches on request: the chunk has no batch left
  int64_t global_step = -1;  // batches on request: the job's step it counts in (1-based)
};

class Feed {
 public:
  virtual ~Feed() = default;
  // The batch at the current position; moves on (to the next epoch after the epoch's last).
  virtual FeedItem next() = 0;
  virtual uint64_t epoch() const = 0;  // of the next batch
  // Batches this rank took in the epoch so far, and how many an epoch has at the group's size now.
  virtual uint64_t step() const = 0;
  virtual uint64_t steps_per_epoch() const = 0;
  virtual uint64_t steps_left() const = 0;  // in this epoch, at the group's size now
  // The position, for checkpoints (kept under checkpoint_key()) and an elastic group's new members.
  virtual std::string state() const = 0;
  virtual void restore(const std::string& state) = 0;
  virtual const char* checkpoint_key() const = 0;
  // A fixed group's feed: to batch `batch` of epoch `epoch` (for a trainer that takes over where a
  // lost one stood). The others throw std::logic_error.
  virtual void seek(uint64_t epoch, uint64_t batch);
  // The batches taken so far are trained (batches on request: the queue counts them complete).
  virtual void done() {}
  // The job's steps so far, where the feed decides them (batches on request); -1: the stepper's.
  virtual int64_t global_step() const { return -1; }
};

using Fetch = std::function<Batch(const std::vector<uint64_t>& indices)>;

std::unique_ptr<Feed> fixed_feed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch, size_t prefetch);

// Batches on request: every next() claims the next batch of the job's shared BatchQueue, so that a
// fast rank takes more of them than a slow one. A job step is a round of `world` batches. The
// position (state()) is the queue's, read once every batch handed out is complete; rank 0 sets
// the queue to the start (unless it joins a running group), and restore() on rank 0 to a
// checkpoint's position.
std::unique_ptr<Feed> shared_feed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch,
                                  const std::string& queue, int rank, int world, bool join);

// An elastic group's feed: set_world() after every regroup.
class ElasticFeed final : public Feed {
 public:
  ElasticFeed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch);
  void set_world(int world, int rank);  // equal shares again
  // Batch shares by speed: each rank's samples of the steps from now on (sum: batch × world).
  // Throws std::invalid_argument for shares of another world or sum.
  void set_shares(std::vector<uint64_t> shares);
  FeedItem next() override;
  uint64_t epoch() const override { return pos_.epoch; }
  uint64_t step() const override;
  uint64_t steps_per_epoch() const override;
  uint64_t steps_left() const override;
  std::string state() const override;
  void restore(const std::string& state) override;
  const char* checkpoint_key() const override { return "elastic_position"; }
  // A batch's worth of sample indices (the first of the epoch's order), for a warm-up pass.
  std::vector<uint64_t> warm_up_indices() const;
  // Samples left until the end of epoch `epochs` from `state`, for the schedule's new end.
  uint64_t samples_left(const std::string& state, uint64_t epochs) const;

 private:
  yard::actors::DistributedSampler sampler_;
  uint64_t batch_;
  Fetch fetch_;
  int world_ = 1, rank_ = 0;
  std::vector<uint64_t> shares_;  // empty: batch_ each
  yard::actors::ElasticPosition pos_;
};

}  // namespace railway_train
