// SealedRing: a group's operations between ranks on different hosts, encrypted and authenticated.
//
// Gloo's TCP transport has no encryption, so when a group spans hosts and the cluster's links are
// encrypted (GroupSpec::link_key), the operations that carry data run here instead of in Gloo's
// algorithms: ring allreduce (reduce-scatter, then allgather), ring allgather, broadcast from the
// root, and point-to-point send and receive, built on Gloo's pairs as a plain byte transport.
// Every message is sealed with AES-256-GCM under a key of its own direction (rank a to rank b),
// derived from the group's link key, the group's name and generation and a random salt each rank
// draws when the group is made, so no two incarnations of a group share keys. A message carries
// its counter (the GCM nonce), which must grow from one message to the next of a direction: a
// replayed, reordered, altered or foreign message fails the operation with CollectiveError.
// Large messages go in segments of kSegmentBytes, each sent as soon as it is sealed and opened
// as soon as it arrives, so encryption overlaps the transfer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "yard/collective.h"

namespace gloo {
class Context;
}

namespace yard::collective {

class GroupStore;
class LinkCipher;

class SealedRing {
 public:
  static constexpr size_t kSegmentBytes = 4 << 20;
  static constexpr size_t kOverhead = 8 + 16;  // counter and GCM tag per segment
  // c = a (op) b over n elements, as Gloo's reduce functions.
  using Reduce = std::function<void(void*, const void*, const void*, size_t)>;
  using Clock = std::chrono::steady_clock;

  // Publishes this rank's salt and reads every other rank's from the store.
  SealedRing(std::shared_ptr<gloo::Context> context, GroupStore& store, const GroupSpec& spec);
  ~SealedRing();
  SealedRing(const SealedRing&) = delete;
  SealedRing& operator=(const SealedRing&) = delete;

  // In place over count elements of elem_size bytes.
  void allreduce(void* data, size_t count, size_t elem_size, const Reduce& reduce, uint32_t tag,
                 std::chrono::milliseconds timeout);
  void broadcast(void* data, size_t bytes, int root, uint32_t tag, std::chrono::milliseconds timeout);
  // out holds world * bytes, rank r's input at r * bytes.
  void allgather(const void* in, void* out, size_t bytes, uint32_t tag, std::chrono::milliseconds timeout);
  void send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);
  void recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);

 private:
  // One step: sends out_bytes at `out` to rank `to` and receives in_bytes from rank `from`
  // (either side skipped with -1 or 0 bytes). Each received segment is opened and then either
  // copied to in_place + its offset, or handed to `take(offset, plain, len)`.
  using Take = std::function<void(size_t offset, const uint8_t* plain, size_t len)>;
  void exchange(int to, const void* out, size_t out_bytes, int from, size_t in_bytes, void* in_place,
                const Take& take, uint32_t tag, Clock::time_point deadline);
  std::chrono::milliseconds left(Clock::time_point deadline) const;

  std::shared_ptr<gloo::Context> context_;
  int rank_, world_;
  std::vector<std::unique_ptr<LinkCipher>> to_, from_;  // per peer: sealing and opening keys
  std::vector<uint64_t> sent_, opened_;                  // per peer: last counter used / accepted
  std::vector<uint8_t> out_buf_, in_buf_;                // sealed segments, reused between steps
};

}  // namespace yard::collective
