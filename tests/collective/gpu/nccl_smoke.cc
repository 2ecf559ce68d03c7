// Single-GPU NCCL smoke test: one-rank groups on CUDA buffers through the real NCCL backend
// (dlopened), every operation, dtype and size checked element by element against the expected
// values; a rank that never arrives gives a CollectiveError naming it within the timeout; the same
// group name destroyed and re-created. Prints one line per check and "N passed, M failed". Needs a
// CUDA device and a Redis at $REDIS (tests/collective/gpu/run-nccl-smoke).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "yard/collective.h"

using namespace yard::collective;
using Clock = std::chrono::steady_clock;

namespace {

int passed = 0, failed = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  (ok ? passed : failed)++;
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device buffer of n elements of type t.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t b) : bytes(b) {
    if (b) cuda(cudaMalloc(&p, b), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  void put(const std::vector<uint8_t>& h) {
    if (bytes) cuda(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  std::vector<uint8_t> get() const {
    std::vector<uint8_t> h(bytes);
    if (bytes) cuda(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return h;
  }
  void poison() {
    if (bytes) cuda(cudaMemset(p, 0xA5, bytes), "cudaMemset");
  }
};

// Element i holds (i % 101) - 50 in the dtype's representation: exact in every type, bfloat16
// included, so world-1 reductions must give back the same bits.
std::vector<uint8_t> pattern(DType t, size_t n) {
  std::vector<uint8_t> h(n * dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    double v = double(i % 101) - 50;
    uint8_t* at = h.data() + i * dtype_size(t);
    switch (t) {
      case DType::kFloat32: { float f = float(v); std::memcpy(at, &f, 4); break; }
      case DType::kFloat64: std::memcpy(at, &v, 8); break;
      case DType::kInt32: { int32_t x = int32_t(v); std::memcpy(at, &x, 4); break; }
      case DType::kInt64: { int64_t x = int64_t(v); std::memcpy(at, &x, 8); break; }
      case DType::kUInt8: at[0] = uint8_t(i % 101); break;
      case DType::kBFloat16: {
        float f = float(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        uint16_t b = uint16_t(bits >> 16);
        std::memcpy(at, &b, 2);
        break;
      }
    }
  }
  return h;
}

// "" when equal, else where the first difference is.
std::string compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType t) {
  if (got.size() != want.size()) return " (size " + std::to_string(got.size()) + " != " + std::to_string(want.size()) + ")";
  size_t es = dtype_size(t);
  for (size_t i = 0; i < got.size(); i += es)
    if (std::memcmp(got.data() + i, want.data() + i, es) != 0) return " (first difference at element " + std::to_string(i / es) + ")";
  return "";
}

GroupSpec spec(const std::string& name, int world, int rank) {
  GroupSpec s;
  s.name = name;
  s.world_size = world;
  s.rank = rank;
  s.backend = Backend::kNccl;
  s.rendezvous = yard::rendezvous_at(getenv("REDIS") ? getenv("REDIS") : "127.0.0.1:6379");
  return s;
}

void every_operation(Communicator& c, DType t, size_t n) {
  const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + ": ";
  auto want = pattern(t, n);
  // Two buffers reduced as one operation, the second of another length.
  size_t m = n / 2 + 1;
  auto want_b = pattern(t, m);
  DeviceBuffer a(want.size()), out(want.size()), b(want_b.size());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    a.put(want);
    c.allreduce(a.p, n, t, op);
    auto d = compare(a.get(), want, t);
    report(d.empty(), what + "allreduce " + op_name(op) + d);
  }
  a.put(want);
  c.broadcast(a.p, n, t, 0);
  auto d = compare(a.get(), want, t);
  report(d.empty(), what + "broadcast" + d);

  a.put(want);
  c.reduce(a.p, n, t, ReduceOp::kSum, 0);
  d = compare(a.get(), want, t);
  report(d.empty(), what + "reduce" + d);

  // Out of place: the output starts as garbage, so an operation that moved nothing fails.
  a.put(want);
  out.poison();
  c.allgather(a.p, out.p, n, t);
  d = n ? compare(out.get(), want, t) : "";
  report(d.empty(), what + "allgather" + d);

  out.poison();
  c.reduce_scatter(a.p, out.p, n, t, ReduceOp::kSum);
  d = n ? compare(out.get(), want, t) : "";
  report(d.empty(), what + "reduce_scatter" + d);

  a.put(want);
  b.put(want_b);
  c.allreduce_coalesced({{a.p, n}, {b.p, m}}, t, ReduceOp::kSum);
  d = compare(a.get(), want, t) + compare(b.get(), want_b, t);
  report(d.empty(), what + "allreduce_coalesced" + d);

  a.put(want);
  auto w = c.allreduce_async(a.p, n, t, ReduceOp::kMax);
  bool finished = w->wait(std::chrono::seconds(30));
  d = finished ? compare(a.get(), want, t) : " (not finished in 30 s)";
  report(d.empty(), what + "allreduce_async" + d);
}

}  // namespace

int main() {
  int devices = 0;
  cudaError_t ce = cudaGetDeviceCount(&devices);
  cudaDeviceProp prop{};
  if (ce == cudaSuccess && devices > 0) cudaGetDeviceProperties(&prop, 0);
  std::printf("CUDA devices: %d (%s)\n", ce == cudaSuccess ? devices : 0,
              ce == cudaSuccess ? prop.name : cudaGetErrorString(ce));
  try {
    auto auto_spec = spec("nccl-smoke-auto", 1, 0);
    auto_spec.backend = Backend::kAuto;
    auto_spec.on_gpu = true;
    auto a = create_group(auto_spec);
    report(a->backend() == Backend::kNccl, "backend auto with GPU tensors picks NCCL");
    a->destroy();

    auto c = create_group(spec("nccl-smoke", 1, 0));
    report(c->backend() == Backend::kNccl, "group uses NCCL");
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16})
      for (size_t n : {size_t(0), size_t(1), size_t(1001), size_t(64u << 20) / dtype_size(t)}) every_operation(*c, t, n);
    c->barrier();
    report(true, "barrier");
    c->destroy();
    bool refused = false;
    try {
      c->barrier();
    } catch (const CollectiveError& e) {
      refused = std::string(e.what()).find("destroyed") != std::string::npos;
    }
    report(refused, "an operation after destroy says the group was destroyed");

    // A member that never arrives: world 2, rank 1 missing.
    auto lonely = spec("nccl-smoke-missing", 2, 0);
    lonely.timeout = std::chrono::seconds(2);
    auto t0 = Clock::now();
    std::string msg;
    try {
      create_group(lonely);
    } catch (const CollectiveError& e) {
      msg = e.what();
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    report(msg.find("nccl-smoke-missing") != std::string::npos && msg.find("nccl_rank1") != std::string::npos,
           "missing rank 1 fails create_group after " + std::to_string(s).substr(0, 4) + " s: " + msg);

    // The same name destroyed and created again, the keys removed each time.
    int good = 0;
    for (int i = 0; i < 20; ++i) {
      auto g = create_group(spec("nccl-smoke-again", 1, 0));
      DeviceBuffer x(sizeof(int64_t));
      auto want = pattern(DType::kInt64, 1);
      x.put(want);
      g->allreduce(x.p, 1, DType::kInt64, ReduceOp::kSum);
      good += x.get() == want;
      g->destroy();
    }
    report(good == 20, "destroy and re-create the same group 20 times (" + std::to_string(good) + " good)");
  } catch (const std::exception& e) {
    report(false, e.what());
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
