// bench/run collective: allreduce, broadcast and allgather with ranks as processes on this node,
// side by side with torch.distributed's gloo backend (Debian's python3-torch) and memcpy.
// Bandwidths follow the nccl-tests convention: algbw = bytes / time; busbw = algbw * 2(n-1)/n for
// allreduce, algbw for broadcast, algbw * (n-1)/n for allgather (bytes = the gathered total).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "yard/job_store.h"
#include "bench_util.h"
#include "yard/process.h"
#include "yard/collective.h"

using namespace yard::collective;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<size_t> kSizes = {4 << 10, 1 << 20, 16 << 20, 64 << 20};

int iters_for(size_t bytes) { return std::max<int>(3, std::min<int>(200, static_cast<int>(64e6 / bytes * 0.5))); }

// One rank: runs every case, rank 0 writes "op bytes seconds_per_op" lines to out_path.
int rank_main(int rank, int world, const std::string& redis, const std::string& out_path) {
  GroupSpec s;
  s.name = "bench";
  s.world_size = world;
  s.rank = rank;
  s.rendezvous = yard::rendezvous_at(redis);
  s.generation = std::to_string(getppid()) + (getenv("BENCH_LINK_KEY") ? "-sealed" : "");
  if (const char* k = getenv("BENCH_LINK_KEY")) s.link_key = k;
  if (getenv("BENCH_TCP")) s.shared_memory = false;
  bool only_large = getenv("BENCH_TCP") != nullptr;
  auto c = create_group(s);
  // The timed loops do not look at results; this does, once, on the path they take.
  {
    std::vector<float> v(1 << 20, float(rank + 1));
    c->allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
    float want = float(world * (world + 1) / 2);
    for (float x : v)
      if (x != want) {
        std::fprintf(stderr, "rank %d: allreduce gave %g, expected %g\n", rank, x, want);
        return 1;
      }
  }
  std::ostringstream lines;
  for (size_t bytes : kSizes) {
    if (only_large && bytes < (16u << 20)) continue;
    size_t n = bytes / 4;
    std::vector<float> x(n, 1.f), gathered(n * world);
    for (std::string op : {"allreduce", "broadcast", "allgather"}) {
      if (only_large && op != "allreduce") continue;
      auto step = [&] {
        if (op == "allreduce") c->allreduce(x.data(), n, DType::kFloat32, ReduceOp::kSum);
        else if (op == "broadcast") c->broadcast(x.data(), n, DType::kFloat32, 0);
        else c->allgather(x.data(), gathered.data(), n, DType::kFloat32);
      };
      step();
      step();
      int k = iters_for(bytes);
      c->barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < k; ++i) step();
      c->barrier();
      double dt = std::chrono::duration<double>(Clock::now() - t0).count() / k;
      lines << op << " " << bytes << " " << dt << "\n";
    }
  }
  c->destroy();
  if (rank == 0) std::ofstream(out_path) << lines.str();
  return 0;
}

std::map<std::pair<std::string, size_t>, double> read_results(const std::string& path) {
  std::map<std::pair<std::string, size_t>, double> r;
  std::ifstream in(path);
  std::string op;
  size_t bytes;
  double t;
  while (in >> op >> bytes >> t) r[{op, bytes}] = t;
  return r;
}

double busbw(const std::string& op, size_t bytes, int n, double t) {
  double algbw = (op == "allgather" ? bytes * double(n) : double(bytes)) / t / 1e9;
  if (op == "allreduce") return algbw * 2.0 * (n - 1) / n;
  if (op == "allgather") return algbw * (n - 1) / n;
  return algbw;
}

// The process settings both sides run with (ranks of either side get the same environment, the
// heap a Switchyard process runs on included), as printed in each record.
const std::map<std::string, std::string> kEnv = [] {
  auto e = yard::sys::allocator_environment();
  e.insert({{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}});
  return e;
}();
std::string settings_json() {
  std::string j = "{\"torch_threads\":1,\"transport_peer\":\"gloo tcp loopback\"";
  for (auto& [k, v] : kEnv) j += ",\"" + k + "\":\"" + v + "\"";
  return j + "}";
}

std::string size_name(size_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + "MiB" : std::to_string(b >> 10) + "KiB";
}


// Runs `world` ranks of this program with extra environment; their results (rank 0's), or an
// empty map when a rank failed.
std::map<std::pair<std::string, size_t>, double> run_ranks(int world, const std::string& redis,
                                                            const std::map<std::string, std::string>& extra,
                                                            const std::function<void(int, std::map<std::string, std::string>&)>& per_rank = {}) {
  std::string out = "/tmp/yard-coll-bench-" + std::to_string(getpid()) + "-" + std::to_string(world) +
                    (extra.empty() ? "" : "-x");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    yard::sys::SpawnOptions so;
    so.env = kEnv;
    so.env.insert({{"BENCH_RANK", std::to_string(r)}, {"BENCH_WORLD", std::to_string(world)},
                   {"BENCH_REDIS", redis}, {"BENCH_OUT", out}});
    for (auto& [k, v] : extra) so.env[k] = v;
    if (per_rank) per_rank(r, so.env);
    so.death_signal = SIGKILL;
    pids.push_back(yard::sys::spawn({yard::sys::self_exe()}, so));
  }
  bool ok = true;
  for (auto p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  auto r = ok ? read_results(out) : std::map<std::pair<std::string, size_t>, double>{};
  std::remove(out.c_str());
  return r;
}

// Ranks counted as two hosts (no shared memory, Gloo's TCP over loopback): allreduce with the
// traffic sealed (a link key, as in a cluster beyond loopback) against the same in clear, so the
// ratio is what encryption costs where the network itself costs least.
void sealed_cases(const std::string& redis, const std::string& only) {
  auto hosts = [](int r, std::map<std::string, std::string>& env) { env["YARD_HOST_ID"] = "bench-host-" + std::to_string(r); };
  auto plain = run_ranks(2, redis, {{"BENCH_TCP", "1"}}, hosts);
  auto sealed = run_ranks(2, redis, {{"BENCH_TCP", "1"}, {"BENCH_LINK_KEY", std::string(64, '7')}}, hosts);
  for (auto& [key, t] : sealed) {
    auto [op, bytes] = key;
    std::string name = op + "_busbw_" + size_name(bytes) + "_w2_sealed";
    if ((!only.empty() && name.find(only) == std::string::npos) || !plain.count(key)) continue;
    double v = busbw(op, bytes, 2, t), pv = busbw(op, bytes, 2, plain[key]);
    std::printf("{\"suite\":\"collective\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"GB/s\",\"peer\":\"gloo_tcp_in_clear\",\"peer_value\":%.4g,\"ratio\":%.4g,\"settings\":%s}\n",
                name.c_str(), v, pv, v / pv, settings_json().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* r = getenv("BENCH_RANK"))
    return rank_main(atoi(r), atoi(getenv("BENCH_WORLD")), getenv("BENCH_REDIS"), getenv("BENCH_OUT"));
  std::string only = argc > 1 ? argv[1] : "";
  std::string peer_script = std::string(argc > 2 ? argv[2] : "bench/torch_gloo_peer.py");
  yard::RendezvousServer redis;
  double mem = yard::bench::memcpy_gbps(64 << 20);
  std::printf("{\"suite\":\"collective\",\"case\":\"memcpy_64MiB\",\"value\":%.4g,\"unit\":\"GB/s\"}\n", mem);
  for (int world : {2, 4}) {
    auto a = run_ranks(world, redis.address(), {});
    if (a.empty()) {
      std::fprintf(stderr, "a rank failed\n");
      return 1;
    }
    std::string theirs = "/tmp/yard-coll-bench-" + std::to_string(getpid()) + ".torch";
    std::vector<std::string> cmd = {"/usr/bin/python3", peer_script, std::to_string(world),
                                    std::to_string(yard::sys::free_port("127.0.0.1")), theirs};
    for (auto b : kSizes) cmd.push_back(std::to_string(b));
    yard::sys::SpawnOptions so;
    so.env = kEnv;
    so.death_signal = SIGKILL;
    pid_t tp = yard::sys::spawn(cmd, so);
    waitpid(tp, nullptr, 0);
    auto b = read_results(theirs);
    std::remove(theirs.c_str());
    for (auto& [key, t] : a) {
      auto [op, bytes] = key;
      std::string name = op + "_busbw_" + size_name(bytes) + "_w" + std::to_string(world);
      if (!only.empty() && name.find(only) == std::string::npos) continue;
      double v = busbw(op, bytes, world, t);
      if (b.count(key)) {
        double pv = busbw(op, bytes, world, b[key]);
        std::printf("{\"suite\":\"collective\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"GB/s\",\"peer\":\"torch_gloo\",\"peer_value\":%.4g,\"ratio\":%.4g,\"settings\":%s}\n",
                    name.c_str(), v, pv, v / pv, settings_json().c_str());
      } else {
        std::printf("{\"suite\":\"collective\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"GB/s\"}\n", name.c_str(), v);
      }
      if (bytes == (4 << 10)) {
        std::string lat = op + "_lat_4KiB_w" + std::to_string(world);
        double us = t * 1e6;
        if (b.count(key))
          std::printf("{\"suite\":\"collective\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"us\",\"peer\":\"torch_gloo\",\"peer_value\":%.4g,\"ratio\":%.4g,\"settings\":%s}\n",
                      lat.c_str(), us, b[key] * 1e6, us / (b[key] * 1e6), settings_json().c_str());
      }
      std::fflush(stdout);
    }
  }
  sealed_cases(redis.address(), only);
  return 0;
}
