// yard::collective — allreduce and friends over a group of ranks (actors, processes or threads).
//
// A group is a name, a world size and a rank per member. Members meet through a rendezvous store
// (yard/job_store.h: in a cluster, their job's store in the control store): each publishes its
// transport address under keys namespaced by group name and generation, and the keys are removed
// when the group is destroyed, so a re-created group never meets stale keys.
//
// Every operation takes Options with a timeout and a tag; a rank that dies or never arrives makes
// the operation fail on the others with CollectiveError (group, operation, reason), never a hang.
// Buffers are raw memory; a LibTorch layer on top maps tensors to these calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yard/errors.h"
#include "yard/job_store.h"

namespace yard::collective {

// kBFloat16 reduces in float32 and rounds back to nearest-even.
enum class DType { kFloat32, kFloat64, kInt32, kInt64, kUInt8, kBFloat16 };
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };
enum class Backend { kAuto, kGloo, kNccl };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* op_name(ReduceOp op);

class CollectiveError : public Error {
 public:
  using Error::Error;
};

struct Options {
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  uint32_t tag = 0;  // tells concurrent operations of one group apart
};

struct GroupSpec {
  std::string name;
  int world_size = 1;
  int rank = 0;
  Backend backend = Backend::kAuto;
  bool on_gpu = false;               // the tensors' device: kAuto picks NCCL for GPU, Gloo for CPU
  // Where the members meet: every member's spec names the same store (in a cluster,
  // cluster_group's job_rendezvous("collective"); ranks that are threads of one program may share
  // a local_rendezvous(); processes outside a cluster, rendezvous_at a RendezvousServer).
  std::shared_ptr<Rendezvous> rendezvous;
  std::string generation = "0";      // distinguishes incarnations of a group name
  std::string host = "127.0.0.1";    // interface this rank's transport listens on
  // When set (key material, e.g. yard::link_settings' key), traffic between ranks on different
  // hosts is encrypted and authenticated (AES-256-GCM, a key per direction derived from it and
  // the group): every rank must be given the same. Ranks on one host talk in the clear (shared
  // memory or loopback). "": no encryption.
  std::string link_key;
  std::chrono::milliseconds timeout = std::chrono::seconds(30);  // rendezvous deadline
  // Same-node fast path: when every rank is on one host, allreduce, broadcast, allgather, reduce,
  // reduce_scatter and barrier go through shared memory instead of loopback TCP, and so do send
  // and receive in groups of up to 16 ranks.
  bool shared_memory = true;
  size_t shm_chunk_bytes = 2 << 20;  // tests set it tiny to exercise the multi-chunk paths
};

// A handle on an operation running in the background.
class Work {
 public:
  virtual ~Work() = default;
  // Waits until the operation finished; rethrows its error. False when the timeout passed first.
  virtual bool wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) = 0;
  virtual bool done() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

namespace impl {
class AsyncRunner;
}

// A member's view of a group. Not thread-safe: one operation at a time per Communicator (use tags
// and separate groups for concurrency).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const std::string& name() const = 0;
  virtual Backend backend() const = 0;
  // True when operations go through the same-node shared-memory path.
  virtual bool uses_shared_memory() const { return false; }
  // True when traffic between this group's ranks is encrypted (they span hosts and have a link key).
  virtual bool encrypts_traffic() const { return false; }

  // In place: data holds count elements on every rank; afterwards, the reduction of all ranks'.
  virtual void allreduce(void* data, size_t count, DType t, ReduceOp op, const Options& o = {}) = 0;
  // Several buffers reduced as one operation (what gradient buckets use).
  virtual void allreduce_coalesced(const std::vector<std::pair<void*, size_t>>& buffers, DType t,
                                   ReduceOp op, const Options& o = {}) = 0;
  virtual void broadcast(void* data, size_t count, DType t, int root, const Options& o = {}) = 0;
  // In place; only root's data holds the result afterwards.
  virtual void reduce(void* data, size_t count, DType t, ReduceOp op, int root, const Options& o = {}) = 0;
  // out holds world_size * count elements, rank r's input at offset r * count.
  virtual void allgather(const void* in, void* out, size_t count, DType t, const Options& o = {}) = 0;
  // in holds world_size * count elements; out gets this rank's count-element slice of the reduction.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp op,
                              const Options& o = {}) = 0;
  virtual void barrier(const Options& o = {}) = 0;
  virtual void send(const void* data, size_t count, DType t, int peer, const Options& o = {}) = 0;
  virtual void recv(void* data, size_t count, DType t, int peer, const Options& o = {}) = 0;

  // Leaves the group: waits (up to the timeout) for every member to leave, then removes the
  // group's rendezvous keys. After destroy, the same name and generation can be created again.
  virtual void destroy(const Options& o = {}) = 0;

  // Asynchronous operations run one after another, in submission order, on this communicator's
  // background thread; the caller keeps the buffers alive until the Work is done. Do not start
  // synchronous operations while asynchronous ones are pending.
  WorkPtr async(std::function<void(Communicator&)> op);
  WorkPtr allreduce_async(void* data, size_t count, DType t, ReduceOp op, const Options& o = {});
  WorkPtr allreduce_coalesced_async(std::vector<std::pair<void*, size_t>> buffers, DType t, ReduceOp op,
                                    const Options& o = {});
  WorkPtr broadcast_async(void* data, size_t count, DType t, int root, const Options& o = {});
  WorkPtr allgather_async(const void* in, void* out, size_t count, DType t, const Options& o = {});

 protected:
  // Backends call this first in their destructor and destroy(): waits for pending work.
  void stop_async();

 private:
  std::shared_ptr<impl::AsyncRunner> runner_;
};

// A GroupSpec that meets through its job's rendezvous store in the cluster this process belongs
// to (after yard::init; groups of two jobs never meet): what actors and tasks use. Its ranks listen on their node's interface, and when
// the cluster's links are encrypted (a cluster beyond loopback), so is the group's traffic
// between hosts. The driver picks the name, ranks and a generation and
// hands them to the members, e.g. as method arguments.
GroupSpec cluster_group(const std::string& name, int world_size, int rank,
                        const std::string& generation = "0");

// Joins (creates) a group; blocks until all world_size members have arrived or spec.timeout.
// Throws CollectiveError naming the group and the ranks that did not arrive, or the backend that
// is unavailable (e.g. NCCL without a CUDA device).
std::unique_ptr<Communicator> create_group(const GroupSpec& spec);

}  // namespace yard::collective
