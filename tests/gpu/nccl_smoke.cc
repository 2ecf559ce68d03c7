// Single-GPU NCCL smoke test: a one-rank group on CUDA buffers through the real NCCL backend
// (dlopened), every operation checked against the expected values. Prints one line per check and
// "N passed, M failed". Needs a CUDA device and a Redis at $REDIS (tests/gpu/run-nccl-smoke).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "yard/collective.h"

using namespace yard::collective;

int main() {
  int passed = 0, failed = 0;
  auto report = [&](bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    (ok ? passed : failed)++;
  };
  GroupSpec s;
  s.name = "nccl-smoke";
  s.world_size = 1;
  s.rank = 0;
  s.backend = Backend::kNccl;
  s.redis_address = getenv("REDIS") ? getenv("REDIS") : "127.0.0.1:6379";
  try {
    auto c = create_group(s);
    report(c->backend() == Backend::kNccl, "group uses NCCL");
    const size_t n = (64u << 20) / sizeof(float);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float(i % 101);
    float* d = nullptr;
    float* g = nullptr;
    cudaMalloc(&d, n * sizeof(float));
    cudaMalloc(&g, n * sizeof(float));
    cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    c->allreduce(d, n, DType::kFloat32, ReduceOp::kSum);
    std::vector<float> back(n);
    cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    report(back == host, "allreduce 64 MiB float32 (world 1)");
    c->broadcast(d, n, DType::kFloat32, 0);
    c->allgather(d, g, n, DType::kFloat32);
    cudaMemcpy(back.data(), g, n * sizeof(float), cudaMemcpyDeviceToHost);
    report(back == host, "broadcast + allgather");
    c->barrier();
    report(true, "barrier");
    auto w = c->allreduce_async(d, n, DType::kFloat32, ReduceOp::kMax);
    report(w->wait(std::chrono::seconds(30)), "async allreduce");
    c->destroy();
    cudaFree(d);
    cudaFree(g);
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    ++failed;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
