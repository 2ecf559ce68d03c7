// Shared by the benchmark programs: the memory-bandwidth peer, the embedded cluster of the
// training benchmarks, and daemons started for a run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <functional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "yard/process.h"
#include "yard/yard.h"

namespace yard::bench {

// Starts `yard start ... --block` (a head or a node) that stops with this process: (pid, address).
// Throws when it does not report ready within two minutes.
inline std::pair<pid_t, std::string> start_daemon(const std::vector<std::string>& argv) {
  yard::sys::SpawnOptions so;
  so.death_signal = SIGTERM;
  so.env["YARD_PARENT_PID"] = std::to_string(getpid());
  auto [pid, line] = yard::sys::spawn_ready(argv, so, std::chrono::seconds(120));
  if (line.empty() || line.rfind("ERROR", 0) == 0) throw std::runtime_error("daemon did not start: " + line);
  return {pid, line.substr(0, line.find(' '))};
}

// Best of five memcpy's of `bytes` between warm buffers, in GB/s.
inline double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, bytes / s / 1e9);
  }
  if (b[bytes / 2] != 1) std::abort();
  return best;
}

// Seconds of `steps` calls of step, after 3 calls to warm up.
inline double timed(const std::function<void()>& step, int steps) {
  for (int i = 0; i < 3; ++i) step();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An embedded cluster of 2 CPUs whose processes use one BLAS and OpenMP thread each (as the
// PyTorch peers do; the cluster's processes inherit them). A worker process serves in here and
// never returns.
inline void init_training_cluster(int argc, char** argv) {
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  yard::InitOptions o;
  o.num_cpus = 2;
  yard::init(o, argc, argv);
}

}  // namespace yard::bench
