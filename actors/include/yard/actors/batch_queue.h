// Batches handed out as workers ask for them: one cursor over each epoch's order of samples
// (DistributedSampler::elastic_batch with world 1), shared by every worker, so that a fast worker
// takes more batches than a slow one instead of waiting for it (asynchronous training: parameter
// servers in async or ssp:K mode). Every position of an epoch is handed out exactly once.
//
// Work comes in chunks: open(n) allows n more batches, never past the end of the epoch (a chunk
// ends there too). A worker's claim completes its previous one; drained() waits until every
// batch handed out is complete (a consistent point for a checkpoint). The position is all the
// state there is ("epoch offset"), kept in checkpoints and set back with seek().
//
// BatchCursor is the pure rule (no processes, no waiting); BatchQueue is the actor around it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "yard/actors/sampler.h"
#include "yard/condition.h"
#include "yard/yard.h"

namespace yard::actors {

// One batch handed out, and where the cursor stands after it.
struct BatchClaim {
  bool granted = false;    // false: the chunk is used up, or the epoch ended (see next_epoch)
  uint64_t epoch = 0;      // the batch: positions [offset, offset + size) of this epoch's order
  uint64_t offset = 0;
  uint64_t size = 0;
  int64_t seq = -1;        // batches handed out before it since the start of the run
  uint64_t next_epoch = 0; // the cursor after it
  uint64_t next_offset = 0;
  bool again = false;      // a lost worker's batch, handed out again
  YARD_FIELDS(granted, epoch, offset, size, seq, next_epoch, next_offset, again);
};

class BatchCursor {
 public:
  // Throws std::invalid_argument when either is 0.
  BatchCursor(uint64_t epoch_size, uint64_t batch);
  // Allows `batches` more claims in the current epoch (a chunk; 0 closes it).
  void open(uint64_t batches);
  // Completes `worker`'s previous claim and hands it the next batch, when the chunk allows one.
  BatchClaim claim(int worker);
  // Completes `worker`'s claim without a new one (it leaves).
  void complete(int worker);
  // `worker` was lost with its claim untrained: the batch is handed out again, to the next claim
  // whether or not the chunk has room. A checkpoint's position does not wait for it, so a restore
  // from a checkpoint taken meanwhile passes over that batch.
  void release(int worker);
  // Batches handed out and not yet complete, and the workers that hold them.
  size_t outstanding() const { return held_.size(); }
  std::vector<int> holders() const;
  ElasticPosition position() const { return pos_; }
  int64_t seq() const;
  uint64_t batches_per_epoch() const { return (epoch_size_ + batch_ - 1) / batch_; }
  uint64_t epoch_size() const { return epoch_size_; }
  // "epoch offset", and back (throws std::invalid_argument for text that is not a position of
  // this epoch size). seek() drops the chunk and the claims outstanding.
  std::string state() const;
  void seek(const std::string& state);

 private:
  uint64_t epoch_size_, batch_;
  ElasticPosition pos_;
  uint64_t budget_ = 0;
  std::map<int, BatchClaim> held_;  // worker -> its claim not yet complete
  std::vector<BatchClaim> returned_;  // claims of lost workers, to hand out again
};

// The actor: one per job, made before the workers know their data. Make it with max_concurrency
// above the number of workers (drained() waits).
class BatchQueue {
 public:
  explicit BatchQueue(uint64_t batch);
  // The epoch's size, said by every worker once it has its data: the first sets it, a different
  // one is refused (std::invalid_argument: the workers disagree about the data).
  void define(uint64_t epoch_size);
  void open(uint64_t batches);
  BatchClaim claim(int worker);
  void complete(int worker);
  void release(int worker);
  // Waits (this call only) until no batch handed out is incomplete. Returns the workers still
  // holding one after timeout_ms (empty: drained).
  std::vector<int> drained(int64_t timeout_ms);
  std::string position();
  void seek(std::string state);
  // Batches each worker has claimed since the queue was made.
  std::map<int, int64_t> taken();

 private:
  BatchCursor& cursor();  // under the lock; throws std::logic_error before define()

  Condition cond_;
  uint64_t batch_;
  std::optional<BatchCursor> cursor_;
  std::map<int, int64_t> taken_;
};

}  // namespace yard::actors
