// Batch shares by speed: each data-parallel replica's part of a step's global batch, sized from its
// measured throughput so that the replicas finish their parts together instead of every step
// waiting for the slowest node (as LB-BSP and Cannikin do). The global batch, and so the learning
// rate, stays fixed; DistributedDataParallel already averages gradients weighted by each rank's
// batch, so uneven shares give the same update as equal ones.
//
// Every rank measures its own rate (samples per second of the time it was busy in a step: the
// optimizer step, fetching, forward and backward, not waiting for the others). The rates travel
// with the gradients (DistributedDataParallel::rates()), so every rank feeds the same numbers to
// its ShareBalancer and all of them arrive at the same shares without another message.
// Pure: no LibTorch, no clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace yard::actors {

// `total` samples split over ranks in proportion to `weights` by largest remainders (ties to the
// lower rank), each at least `floor` where total allows it (floor × ranks <= total, else floor 0).
// A weight that is not a positive finite number counts as the mean of the valid ones (all equal
// when none is valid). The shares add up to total. Throws std::invalid_argument for no ranks.
std::vector<uint64_t> split_by_weight(uint64_t total, const std::vector<double>& weights, uint64_t floor = 1);

class ShareBalancer {
 public:
  // global: samples per step over all ranks; window: a rank's rate is the median of its last
  // `window` measurements (a step slowed by something else, such as a descheduled thread, moves no
  // share; a node that stays slower moves them within about window / 2 steps). Starts with equal
  // shares. Throws std::invalid_argument for no ranks or a window of 0.
  ShareBalancer(uint64_t global, int world, size_t window = 5);
  // After a step: every rank's measured rate (samples per busy second; 0 or not finite where a rank
  // measured none, e.g. the first step of a group). Rates of another world size are ignored.
  void observe(const std::vector<double>& rates);
  // This step's samples for each rank (sum: global).
  const std::vector<uint64_t>& shares() const { return shares_; }
  // Whether the shares differ between ranks.
  bool uneven() const;

 private:
  uint64_t global_;
  size_t window_;
  std::vector<std::deque<double>> seen_;  // per rank: its last measurements
  std::vector<double> rates_;  // the medians the shares come from (0: not measured yet)
  std::vector<uint64_t> shares_;
};

}  // namespace yard::actors
