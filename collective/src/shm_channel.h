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
// After those, in groups of up to kMailWorld ranks, a pipe for each ordered pair of ranks carries
// send and receive (shm_mailbox.h); its pages are touched only by the pairs that talk.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shm_mailbox.h"
#include "yard/collective.h"

namespace yard::collective {

class GroupStore;

class ShmChannel {
 public:
  // Collective over the group: rank 0 creates the segment and publishes its name in the store;
  // the others attach. The segment's name is unlinked once everyone has attached.
  ShmChannel(GroupStore& store, const GroupSpec& spec, size_t chunk_bytes);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  void allreduce(void* data, size_t count, DType t, ReduceOp op, std::chrono::milliseconds timeout);
  void broadcast(void* data, size_t count, DType t, int root, std::chrono::milliseconds timeout);
  void allgather(const void* in, void* out, size_t count, DType t, std::chrono::milliseconds timeout);
  void barrier(std::chrono::milliseconds timeout);

  // Point-to-point, when the group is small enough to have its pipes.
  static constexpr int kMailWorld = 16;
  bool has_mail() const { return mail_ != nullptr; }
  void send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);
  void recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);

 private:
  void sync(std::chrono::steady_clock::time_point deadline, const char* op);
  // Throws when rank q's process is gone (or, for check_peer, the deadline passed).
  void throw_if_dead(int q) const;
  void check_peer(int q, std::chrono::steady_clock::time_point deadline) const;
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
  char* mail_base_ = nullptr;
  size_t mail_bytes_ = 0;
  std::unique_ptr<ShmMail> mail_;
};

}  // namespace yard::collective
