// The NCCL backend: CUDA device buffers. Built as its own shared library and loaded with dlopen
// only when a group asks for NCCL, so CPU-only programs never load libnccl or libcudart.
//
// Rendezvous: rank 0 makes the NCCL unique id and publishes it in the group's Redis namespace;
// the others wait for it (with the group's deadline). Operations run on one stream per
// communicator and are waited for by polling, so a dead peer ends in ncclCommAbort and a
// CollectiveError after the timeout instead of a hang.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "rendezvous_store.h"
#include "yard/collective.h"

namespace yard::collective {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kUInt8: return ncclUint8;
    case DType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const GroupSpec& spec) : spec_(spec) {
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess)
      throw CollectiveError("group '" + spec.name + "': no CUDA device (cudaGetDeviceCount failed with error " +
                            std::to_string(static_cast<int>(ce)) + ": " + cudaGetErrorString(ce) + ")");
    if (n == 0) throw CollectiveError("group '" + spec.name + "': no CUDA device");
    device_ = spec.rank % n;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    store_ = std::make_unique<GroupStore>(spec.rendezvous, spec.name, spec.generation, spec.timeout);
    try {
      rendezvous(spec);
    } catch (...) {
      // Leave nothing behind that a later incarnation of the group could mistake for its own.
      try {
        store_->erase(arrival_key(spec.rank));
        if (spec.rank == 0) store_->erase("nccl_id");
      } catch (...) {
      }
      throw;
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    try { destroy({}); } catch (...) {}
  }

  int rank() const override { return spec_.rank; }
  int world_size() const override { return spec_.world_size; }
  const std::string& name() const override { return spec_.name; }
  Backend backend() const override { return Backend::kNccl; }

  void allreduce(void* d, size_t n, DType t, ReduceOp op, const Options& o) override {
    if (n == 0) return;
    run("allreduce", o, [&] { return ncclAllReduce(d, d, n, nccl_type(t), nccl_op(op), comm_, stream_); });
  }
  void allreduce_coalesced(const std::vector<std::pair<void*, size_t>>& bufs, DType t, ReduceOp op,
                           const Options& o) override {
    run("allreduce_coalesced", o, [&] {
      ncclGroupStart();
      for (auto& b : bufs)
        if (b.second) ncclAllReduce(b.first, b.first, b.second, nccl_type(t), nccl_op(op), comm_, stream_);
      return ncclGroupEnd();
    });
  }
  void broadcast(void* d, size_t n, DType t, int root, const Options& o) override {
    if (n == 0) return;
    run("broadcast", o, [&] { return ncclBroadcast(d, d, n, nccl_type(t), root, comm_, stream_); });
  }
  void reduce(void* d, size_t n, DType t, ReduceOp op, int root, const Options& o) override {
    if (n == 0) return;
    run("reduce", o, [&] { return ncclReduce(d, d, n, nccl_type(t), nccl_op(op), root, comm_, stream_); });
  }
  void allgather(const void* in, void* out, size_t n, DType t, const Options& o) override {
    if (n == 0) return;
    run("allgather", o, [&] { return ncclAllGather(in, out, n, nccl_type(t), comm_, stream_); });
  }
  void reduce_scatter(const void* in, void* out, size_t n, DType t, ReduceOp op, const Options& o) override {
    if (n == 0) return;
    run("reduce_scatter", o, [&] { return ncclReduceScatter(in, out, n, nccl_type(t), nccl_op(op), comm_, stream_); });
  }
  void barrier(const Options& o) override {
    void* one = nullptr;
    check_cuda(cudaMalloc(&one, sizeof(float)), "cudaMalloc");
    try {
      run("barrier", o, [&] { return ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_); });
    } catch (...) {
      cudaFree(one);
      throw;
    }
    cudaFree(one);
  }
  void send(const void* d, size_t n, DType t, int peer, const Options& o) override {
    if (n == 0) return;
    run("send", o, [&] { return ncclSend(d, n, nccl_type(t), peer, comm_, stream_); });
  }
  void recv(void* d, size_t n, DType t, int peer, const Options& o) override {
    if (n == 0) return;
    run("recv", o, [&] { return ncclRecv(d, n, nccl_type(t), peer, comm_, stream_); });
  }
  void destroy(const Options&) override {
    stop_async();
    if (!comm_) return;
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    if (store_->incr("left") >= spec_.world_size) store_->remove_all();
  }

 private:
  static std::string arrival_key(int rank) { return "nccl_rank" + std::to_string(rank); }
  void rendezvous(const GroupSpec& spec) {
    // Every member says it is here before NCCL's own bootstrap starts: ncclCommInitRank waits
    // without a deadline for ranks that never come, the store names them within the timeout.
    store_->set(arrival_key(spec.rank), {'1'});
    std::vector<std::string> others;
    for (int r = 0; r < spec.world_size; ++r)
      if (r != spec.rank) others.push_back(arrival_key(r));
    store_->wait(others);
    ncclUniqueId id;
    if (spec.rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set("nccl_id", std::vector<char>(reinterpret_cast<char*>(&id), reinterpret_cast<char*>(&id) + sizeof id));
    } else {
      auto v = store_->get("nccl_id");
      if (v.size() != sizeof id) throw CollectiveError("group '" + spec.name + "': malformed NCCL id in the store");
      std::memcpy(&id, v.data(), sizeof id);
    }
    check(ncclCommInitRank(&comm_, spec.world_size, id, spec.rank), "ncclCommInitRank");
  }
  void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
      throw CollectiveError("group '" + spec_.name + "' rank " + std::to_string(spec_.rank) + ": " + what +
                            " failed: " + ncclGetErrorString(r));
  }
  void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw CollectiveError("group '" + spec_.name + "' rank " + std::to_string(spec_.rank) + ": " + what +
                            " failed: " + cudaGetErrorString(e));
  }
  template <class F>
  void run(const char* op, const Options& o, F&& enqueue) {
    if (!comm_) throw CollectiveError("group '" + spec_.name + "' was destroyed");
    check(enqueue(), op);
    auto deadline = std::chrono::steady_clock::now() + o.timeout;
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check_cuda(q, op);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess || std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw CollectiveError("group '" + spec_.name + "' rank " + std::to_string(spec_.rank) + ": " + op +
                              (async != ncclSuccess ? std::string(" failed: ") + ncclGetErrorString(async)
                                                    : " timed out (a peer died or never arrived)"));
      }
      std::this_thread::yield();
    }
  }

  GroupSpec spec_;
  int device_ = 0;
  std::unique_ptr<GroupStore> store_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace
}  // namespace yard::collective

// The entry point create_group() looks up with dlsym. On failure returns nullptr and writes the
// reason into err.
extern "C" __attribute__((visibility("default"))) yard::collective::Communicator* yard_nccl_create(
    const yard::collective::GroupSpec* spec, char* err, size_t errlen) {
  try {
    return new yard::collective::NcclCommunicator(*spec);
  } catch (const std::exception& e) {
    std::snprintf(err, errlen, "%s", e.what());
    return nullptr;
  }
}
