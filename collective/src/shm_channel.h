// ShmChannel: the same-node fast path. When every rank of a group runs on one host, operations go
// through one shared-memory segment instead of loopback TCP, as NCCL does inside a node.
//
// Layout: a header with one cache line per rank (its barrier epoch), then one slot per rank and
// two result buffers, each `chunk` bytes. A message is processed chunk by chunk:
//   allreduce: every rank copies its chunk into its slot; barrier; rank r reduces the r-th
//     1/n of the chunk across all slots into the result buffer; barrier; every rank copies the
//     whole reduced chunk out. Result buffers alternate between chunks, so a rank copying out
//     chunk k never races with ranks reducing chunk k+1 (they cannot pass chunk k+1's first
//     barrier before everyone finished copying chunk k... of the same buffer two chunks ago).
//   broadcast: root copies into the result buffer; barrier; the others copy out; barrier.
//   allgather: every rank copies its input into its slot; barrier; everyone copies all slots out.
// A barrier waits for every rank's epoch to reach the barrier number, spinning briefly, then
// yielding; past the deadline it throws CollectiveError naming the ranks that never arrived.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "yard/collective.h"

namespace yard::collective {

class RedisStore;

class ShmChannel {
 public:
  // Collective over the group: rank 0 creates the segment and publishes its name in the store;
  // the others attach. The segment's name is unlinked once everyone has attached.
  ShmChannel(RedisStore& store, const GroupSpec& spec, size_t chunk_bytes);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  void allreduce(void* data, size_t count, DType t, ReduceOp op, std::chrono::milliseconds timeout);
  void broadcast(void* data, size_t count, DType t, int root, std::chrono::milliseconds timeout);
  void allgather(const void* in, void* out, size_t count, DType t, std::chrono::milliseconds timeout);
  void barrier(std::chrono::milliseconds timeout);

 private:
  void sync(std::chrono::steady_clock::time_point deadline, const char* op);
  char* slot(int r) const { return slots_ + static_cast<size_t>(r) * chunk_; }
  char* result(uint64_t k) const { return slots_ + static_cast<size_t>(world_ + (k & 1)) * chunk_; }

  std::string group_;
  int rank_, world_;
  size_t chunk_;
  size_t bytes_ = 0;
  char* base_ = nullptr;
  char* slots_ = nullptr;
  uint64_t epoch_ = 0;   // barriers this rank has passed
  uint64_t chunks_ = 0;  // chunks processed (result buffer parity)
};

}  // namespace yard::collective
