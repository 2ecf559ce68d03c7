// DataLoader: one rank's batches, epoch after epoch, made ahead of time on a background thread.
//
// Which samples a batch holds is the DistributedSampler's business (seeded per-epoch shuffle,
// strided over the ranks, optionally class-balanced); turning those indices into a batch is the
// `fetch` function's (read, decode, stack: whatever the dataset needs). Up to `prefetch` batches
// are fetched while the trainer computes; next() hands them over in order.
//
// The position — the epoch and step of the next batch — is all the state there is: put
// position() in a checkpoint and seek() to it after a restore, and the same batches follow.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "yard/actors/sampler.h"

namespace yard::actors {

template <class Batch>
class DataLoader {
 public:
  using Fetch = std::function<Batch(const std::vector<uint64_t>& indices)>;
  struct Item {
    uint64_t epoch = 0, step = 0;      // where this batch is
    std::vector<uint64_t> indices;     // which samples it holds (may be empty at an epoch's end)
    Batch batch;
  };

  DataLoader(DistributedSampler sampler, uint64_t batch_size, Fetch fetch, size_t prefetch = 2)
      : sampler_(std::move(sampler)), batch_(batch_size), fetch_(std::move(fetch)), depth_(std::max<size_t>(1, prefetch)) {
    if (batch_ == 0) throw std::invalid_argument("DataLoader: batch size 0");
    steps_ = sampler_.steps_per_epoch(batch_);
    thread_ = std::thread([this] { run(); });
  }
  ~DataLoader() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The batch at the current position; moves on (to the next epoch after its last step).
  // Rethrows what fetch threw for it.
  Item next() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !ready_.empty() || error_; });
    if (ready_.empty()) std::rethrow_exception(error_);
    Item it = std::move(ready_.front());
    ready_.pop_front();
    pos_ = advance({it.epoch, it.step});
    cv_.notify_all();
    return it;
  }

  // The position of the batch next() returns next.
  SamplerState position() const {
    std::lock_guard<std::mutex> l(mu_);
    return pos_;
  }
  // Continues from a position (a checkpoint's); batches fetched ahead are dropped.
  void seek(SamplerState p) {
    if (p.step > steps_) throw std::invalid_argument("DataLoader: step " + std::to_string(p.step) + " is past the epoch's " +
                                                     std::to_string(steps_) + " steps");
    if (p.step == steps_) p = {p.epoch + 1, 0};
    std::lock_guard<std::mutex> l(mu_);
    pos_ = p;
    fetch_pos_ = p;
    ready_.clear();
    error_ = nullptr;
    ++generation_;
    cv_.notify_all();
  }
  uint64_t steps_per_epoch() const { return steps_; }

  // A position as text ("epoch step") and back, for checkpoints.
  static std::string encode(SamplerState p) { return std::to_string(p.epoch) + " " + std::to_string(p.step); }
  static SamplerState decode(const std::string& s) {
    SamplerState p;
    size_t at = 0;
    try {
      p.epoch = std::stoull(s, &at);
      p.step = std::stoull(s.substr(at));
    } catch (const std::exception&) {
      throw std::invalid_argument("DataLoader: bad position '" + s + "' (want \"epoch step\")");
    }
    return p;
  }

 private:
  SamplerState advance(SamplerState p) const { return p.step + 1 >= steps_ ? SamplerState{p.epoch + 1, 0} : SamplerState{p.epoch, p.step + 1}; }

  void run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || (ready_.size() < depth_ && !error_); });
      if (stop_) return;
      SamplerState p = fetch_pos_;
      uint64_t gen = generation_;
      l.unlock();
      Item it;
      it.epoch = p.epoch;
      it.step = p.step;
      std::exception_ptr err;
      try {
        it.indices = sampler_.batch(p.epoch, p.step, batch_);
        it.batch = fetch_(it.indices);
      } catch (...) {
        err = std::current_exception();
      }
      l.lock();
      if (gen != generation_) continue;  // a seek() while fetching: this batch is not wanted
      if (err) {
        error_ = err;
      } else {
        ready_.push_back(std::move(it));
        fetch_pos_ = advance(p);
      }
      cv_.notify_all();
    }
  }

  DistributedSampler sampler_;  // used by the fetch thread only (its batch cache is not thread-safe)
  uint64_t batch_;
  Fetch fetch_;
  size_t depth_;
  uint64_t steps_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;
  SamplerState pos_, fetch_pos_;
  uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace yard::actors
