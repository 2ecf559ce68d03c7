// DistributedSampler: which samples each rank sees, epoch by epoch.
//
// Every epoch is a permutation of the dataset seeded by (seed, epoch) — the same on every rank
// without any communication — split across ranks by striding (rank r takes positions r, r+W,
// ...). In an epoch every sample is seen exactly once over all ranks: nothing is repeated to even
// the ranks out (unlike padding samplers) and nothing is dropped. Ranks then differ by at most one
// sample; every rank runs the same number of steps, and a rank's last batch may be short or empty
// (the trainer weights gradients by batch size, so the step still averages over the global batch).
//
// Class-balanced mode draws, per epoch, every sample of a class once and then random repeats of
// the class up to most * (n_class / most)^(1 - power), where `most` is the largest class's count:
// power 1 gives every class the same share, 0.5 a share growing as the square root of its size
// (rare classes seen often without drowning the common one's calibration) — an optional
// departure from "each sample once".
//
// The position (epoch, step) is all the state there is: a checkpoint restores it exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yard::actors {

struct SamplerState {
  uint64_t epoch = 0;
  uint64_t step = 0;  // batches already taken in this epoch
};

// Where an elastic group is in its data: the epoch, and how many of the epoch's positions the
// steps so far have taken.
struct ElasticPosition {
  uint64_t epoch = 0;
  uint64_t offset = 0;
  // After a step of `world` ranks: the next epoch when this one is used up.
  void advance(int world, uint64_t batch_size, uint64_t epoch_size);
  // As text, "epoch offset", and back (throws std::invalid_argument naming text that is not one).
  std::string text() const;
  static ElasticPosition parse(const std::string& text);
};

class DistributedSampler {
 public:
  DistributedSampler(uint64_t dataset_size, int world_size, int rank, uint64_t seed, bool shuffle = true);
  // Balanced mode: labels[i] is sample i's class; power in (0, 1].
  void set_class_balanced(std::vector<int> labels, double power = 1.0);

  // This rank's sample indices for an epoch.
  std::vector<uint64_t> indices(uint64_t epoch) const;
  // Steps per epoch at this batch size: the same on every rank.
  uint64_t steps_per_epoch(uint64_t batch_size) const;
  // The batch of a step (may be shorter than batch_size, or empty, at the end of an epoch).
  std::vector<uint64_t> batch(uint64_t epoch, uint64_t step, uint64_t batch_size) const;

  // Elastic training, where the number of ranks changes between steps: the epoch's order is taken
  // as one sequence, and a step of `world` ranks takes its next batch_size × world positions,
  // rank r every world-th from `offset + r`. Whatever the world size of each step, every position
  // of the epoch is taken exactly once. With a fixed world size this is batch() (offset =
  // step × batch_size × world), so a fixed group and an elastic one see the same samples.
  std::vector<uint64_t> elastic_batch(uint64_t epoch, uint64_t offset, int world, int rank, uint64_t batch_size) const;
  // The same step with uneven shares (batch shares by speed): shares[r] positions for rank r, the
  // ranks' blocks one after the other from `offset` (each step still takes the same positions, so
  // the epoch is covered exactly once). Equal shares give elastic_batch()'s striding; at the
  // epoch's end the positions left are split in proportion to the shares.
  std::vector<uint64_t> shared_batch(uint64_t epoch, uint64_t offset, const std::vector<uint64_t>& shares, int rank) const;

  int world_size() const { return world_; }
  int rank() const { return rank_; }
  uint64_t epoch_size() const;  // samples per epoch over all ranks

 private:
  std::vector<uint64_t> epoch_order(uint64_t epoch) const;
  const std::vector<uint64_t>& whole_epoch(uint64_t epoch) const;  // epoch_order, cached

  uint64_t n_;
  int world_, rank_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int> labels_;  // non-empty: class-balanced
  double power_ = 1.0;
  // Samples a class of n gets per epoch (most: the largest class's count).
  uint64_t class_draws(uint64_t n, uint64_t most) const;
  // The last epoch's indices (batch() is called step after step). Not thread-safe.
  mutable uint64_t cached_epoch_ = UINT64_MAX;
  mutable std::vector<uint64_t> cached_;
  mutable bool cached_whole_ = false;  // cached_ holds the whole epoch (elastic_batch), not this rank's
};

}  // namespace yard::actors
