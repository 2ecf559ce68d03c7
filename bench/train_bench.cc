// bench/run train: data-parallel training throughput against PyTorch DDP (gloo) on the same model
// (the railway Transformer: input projection, learned positions, encoder, max-pool, two heads),
// the same batch, one thread per worker, the same OpenBLAS; plus DDP efficiency and the training
// time a checkpoint costs.
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "../apps/railway/train/model.h"
#include "../tests/support.h"
#include "process.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/ddp.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"

using Clock = std::chrono::steady_clock;

namespace {

// The railway model itself, 6 features and 128 tokens per window.
struct Net : RailwayNet {
  Net(int64_t d, int64_t layers) : RailwayNet(6, 128, d, layers) {}
};

// How the ranks train: each on its own; data-parallel (DDP); or in lock step without any
// gradient exchange (a barrier after every backward): what synchronous training costs on this
// machine before any communication, the limit for DDP's efficiency.
enum class Mode { kIndependent, kDdp, kLockstep };
const char* mode_name(Mode m) { return m == Mode::kDdp ? "ddp" : m == Mode::kLockstep ? "lockstep" : "independent"; }

// One rank: trains `steps` steps; rank 0 writes samples/s (and the checkpoint stall) to out.
// TB_PROFILE=1: each rank prints its milliseconds per step in each phase.
int rank_main(int rank, int world, const std::string& redis, int64_t d, int64_t layers, int64_t batch, int steps,
              Mode mode, const std::string& out, bool checkpoint) {
  torch::set_num_threads(1);
  yard::actors::keep_freed_memory();
  torch::manual_seed(1);
  Net net(d, layers);
  std::unique_ptr<yard::collective::Communicator> comm;
  std::unique_ptr<yard::actors::DistributedDataParallel> dp;
  bool sync = mode != Mode::kIndependent;
  if (sync) {
    yard::collective::GroupSpec s;
    s.name = "train-bench";
    s.world_size = world;
    s.rank = rank;
    s.redis_address = redis;
    s.generation = std::to_string(getppid()) + "-" + std::to_string(d);
    comm = yard::collective::create_group(s);
    if (mode == Mode::kDdp) {
      yard::actors::DdpOptions o;
      if (const char* mb = getenv("TB_BUCKET_MB")) o.bucket_bytes = static_cast<size_t>(atof(mb) * (1 << 20));
      dp = std::make_unique<yard::actors::DistributedDataParallel>(net.ptr(), *comm, o);
      dp->broadcast_state(0);
    }
  }
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::randn({batch, 128, 6});
  auto y = torch::randint(0, 5, {batch}, torch::kLong);
  auto a = torch::randn({batch});
  double ph[4] = {0, 0, 0, 0};
  auto step = [&] {
    auto t0 = Clock::now();
    if (dp) dp->begin_step(batch);
    for (auto& p : net->parameters()) p.mutable_grad().reset();  // zero_grad(set_to_none)
    auto [logits, amp] = net->forward(x);
    auto loss = torch::nn::functional::cross_entropy(logits, y) + torch::mse_loss(amp, a);
    auto t1 = Clock::now();
    loss.backward();
    auto t2 = Clock::now();
    if (dp) dp->finish_step();
    else if (comm) comm->barrier();  // lock step
    auto t3 = Clock::now();
    opt.step();
    auto t4 = Clock::now();
    ph[0] += std::chrono::duration<double>(t1 - t0).count();
    ph[1] += std::chrono::duration<double>(t2 - t1).count();
    ph[2] += std::chrono::duration<double>(t3 - t2).count();
    ph[3] += std::chrono::duration<double>(t4 - t3).count();
  };
  for (int i = 0; i < 3; ++i) step();
  for (auto& v : ph) v = 0;
  if (comm) comm->barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  if (comm) comm->barrier();
  double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  if (getenv("TB_PROFILE"))
    std::fprintf(stderr, "rank %d %s ms/step: forward %.1f backward %.1f finish %.1f optimizer %.1f\n", rank,
                 mode_name(mode), ph[0] * 1e3 / steps, ph[1] * 1e3 / steps, ph[2] * 1e3 / steps, ph[3] * 1e3 / steps);
  double stall = 0;
  if (checkpoint) {
    // The training time a checkpoint costs: the snapshot taken on the training thread (copies of
    // the model's and the optimizer's tensors; the serialising and the file writing happen on the
    // store's thread), as a fraction of one step. Every rank keeps stepping.
    auto dir = "/tmp/yard-train-bench-ckpt-" + std::to_string(getpid());
    yard::actors::CheckpointStore store(dir, 2);
    std::vector<double> took;
    for (int i = 0; i < 5; ++i) {
      if (rank != 0) {
        step();
        continue;
      }
      auto c0 = Clock::now();
      yard::actors::StateSnapshot model(*net), optimizer(opt);
      store.write_async(std::function<yard::actors::Checkpoint()>([=] {
        yard::actors::Checkpoint c;
        c.step = static_cast<uint64_t>(i);
        c.blobs["model"] = model.bytes();
        c.blobs["optimizer"] = optimizer.bytes();
        return c;
      }));
      took.push_back(std::chrono::duration<double>(Clock::now() - c0).count());
      step();
    }
    store.wait();
    std::filesystem::remove_all(dir);
    if (getenv("TB_PROFILE") && !took.empty()) {
      std::fprintf(stderr, "rank %d checkpoint hand-overs (ms):", rank);
      for (double t : took) std::fprintf(stderr, " %.3f", t * 1e3);
      std::fprintf(stderr, "\n");
    }
    std::sort(took.begin(), took.end());
    if (!took.empty()) stall = took[took.size() / 2] / (dt / steps);  // the median checkpoint
  }
  if (comm) comm->destroy();
  // Synchronised: rank 0 reports the group's rate. Independent: every rank reports its own, and
  // the rates add up.
  if (sync && rank == 0) std::ofstream(out) << steps * batch * world / dt << " " << stall << "\n";
  if (!sync) std::ofstream(out) << steps * batch / dt << " " << stall << "\n";
  return 0;
}

// Runs `world` ranks as processes; returns rank 0's figures.
std::pair<double, double> run_ours(int world, const std::string& redis, int64_t d, int64_t layers, int64_t batch, int steps,
                                   Mode mode, bool checkpoint = false) {
  bool sync = mode != Mode::kIndependent;
  std::string out = "/tmp/yard-train-bench-" + std::to_string(getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    yard::detail::SpawnOptions so;
    so.env = {{"TB_RANK", std::to_string(r)}, {"TB_WORLD", std::to_string(world)}, {"TB_REDIS", redis},
              {"TB_D", std::to_string(d)}, {"TB_LAYERS", std::to_string(layers)}, {"TB_BATCH", std::to_string(batch)},
              {"TB_STEPS", std::to_string(steps)}, {"TB_MODE", std::to_string(static_cast<int>(mode))}, {"TB_CKPT", checkpoint ? "1" : "0"},
              {"TB_OUT", sync || r == 0 ? out : out + ".r" + std::to_string(r)}, {"OMP_NUM_THREADS", "1"},
              {"OPENBLAS_NUM_THREADS", "1"}};
    so.death_signal = SIGKILL;
    pids.push_back(yard::detail::spawn({yard::detail::self_exe()}, so));
  }
  for (auto p : pids) waitpid(p, nullptr, 0);
  double v = 0, stall = 0;
  std::ifstream(out) >> v >> stall;
  std::remove(out.c_str());
  if (!sync) {
    // Independent trainers: their throughputs add up.
    for (int r = 1; r < world; ++r) {
      double o = 0, s = 0;
      std::ifstream(out + ".r" + std::to_string(r)) >> o >> s;
      v += o;
      std::remove((out + ".r" + std::to_string(r)).c_str());
    }
  }
  return {v, stall};
}

double run_torch(int world, int64_t d, int64_t layers, int64_t batch, int steps, const std::string& script) {
  std::string out = "/tmp/yard-train-bench-torch-" + std::to_string(getpid());
  yard::detail::SpawnOptions so;
  so.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  so.death_signal = SIGKILL;
  pid_t p = yard::detail::spawn({"/usr/bin/python3", script, std::to_string(world),
                                 std::to_string(yard::detail::free_port("127.0.0.1")), std::to_string(d),
                                 std::to_string(layers), std::to_string(batch), std::to_string(steps), out},
                                so);
  waitpid(p, nullptr, 0);
  double v = 0;
  std::ifstream(out) >> v;
  std::remove(out.c_str());
  return v;
}

void emit(const char* name, double v, const char* unit, const char* peer = nullptr, double pv = 0) {
  if (peer)
    std::printf("{\"suite\":\"train\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\",\"peer\":\"%s\",\"peer_value\":%.4g,\"ratio\":%.4g}\n",
                name, v, unit, peer, pv, v / pv);
  else
    std::printf("{\"suite\":\"train\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\"}\n", name, v, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* r = getenv("TB_RANK"))
    return rank_main(atoi(r), atoi(getenv("TB_WORLD")), getenv("TB_REDIS"), atoll(getenv("TB_D")), atoll(getenv("TB_LAYERS")),
                     atoll(getenv("TB_BATCH")), atoi(getenv("TB_STEPS")), static_cast<Mode>(atoi(getenv("TB_MODE"))),
                     getenv("TB_OUT"), std::string(getenv("TB_CKPT")) == "1");
  std::string script = argc > 1 ? argv[1] : "bench/torch_ddp_peer.py";
  yard::test::RedisServer redis;
  // TB_ONLY=<case> runs one case (for experiments); bench/run runs them all.
  std::string only = getenv("TB_ONLY") ? getenv("TB_ONLY") : "";
  auto want = [&](const char* c) { return only.empty() || only == c; };
  if (want("ddp_samples_per_s_w2_small") || want("checkpoint_stall_frac")) {
    auto small = run_ours(2, redis.address(), 64, 2, 32, 100, Mode::kDdp, true);
    if (want("ddp_samples_per_s_w2_small"))
      emit("ddp_samples_per_s_w2_small", small.first, "samples/s", "pytorch_ddp_gloo", run_torch(2, 64, 2, 32, 100, script));
    if (want("checkpoint_stall_frac")) emit("checkpoint_stall_frac", small.second, "fraction");
  }
  if (want("ddp_samples_per_s_w2_large")) {
    auto large = run_ours(2, redis.address(), 256, 4, 32, 20, Mode::kDdp).first;
    emit("ddp_samples_per_s_w2_large", large, "samples/s", "pytorch_ddp_gloo", run_torch(2, 256, 4, 32, 20, script));
  }
  if (want("ddp_efficiency_w2_large")) {
    // DDP ÷ independent trainers, with lock step alone (a barrier after every backward, no
    // gradients exchanged) ÷ independent as the limit beside it. Three rounds, each running the
    // three in a rotated order; the medians, so one noisy moment of this shared 2-core machine
    // weighs on no side alone.
    std::map<Mode, std::vector<double>> rate;
    const Mode order[] = {Mode::kIndependent, Mode::kDdp, Mode::kLockstep};
    for (int round = 0; round < 3; ++round)
      for (int i = 0; i < 3; ++i) {
        Mode m = order[(i + round) % 3];
        rate[m].push_back(run_ours(2, redis.address(), 256, 4, 32, 20, m).first);
      }
    auto median = [&](Mode m) {
      auto v = rate[m];
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (auto& [m, v] : rate) {
      std::fprintf(stderr, "ddp_efficiency_w2_large: %s", mode_name(m));
      for (double x : v) std::fprintf(stderr, " %.2f", x);
      std::fprintf(stderr, " samples/s\n");
    }
    double indep = median(Mode::kIndependent);
    emit("ddp_efficiency_w2_large", median(Mode::kDdp) / indep, "ratio", "lockstep_barrier_efficiency",
         median(Mode::kLockstep) / indep);
  }

  // Convergence: the railway job with 1, 2 and 4 trainers (linear LR scaling with warm-up and a
  // cosine decay), the same 3 epochs over the same 4 logs of 30 km; then the same job on shards
  // made without alignment.
  if (argc > 2 && (want("convergence_val_loss_spread") || want("aligned_val_macro_f1"))) {
    std::string job = argv[2];
    auto dir = std::filesystem::temp_directory_path() / ("yard-train-conv-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    auto run_job = [&](int workers, bool unaligned) {
      std::string out = (dir / ("w" + std::to_string(workers) + (unaligned ? "-raw" : ""))).string();
      std::string cmd = job + " --workers " + std::to_string(workers) + " --epochs 3 --logs 4 --length-km 30 --data " +
                        (dir / "data").string() + " --out " + out + (unaligned ? " --unaligned" : "") + " > " + out + ".log 2>&1";
      if (std::system(cmd.c_str()) != 0) return std::pair<double, double>{NAN, NAN};
      std::ifstream m(out + "/metrics.jsonl");
      std::string line, last;
      while (std::getline(m, line)) last = line;
      auto field = [&](const std::string& k) {
        auto at = last.find("\"" + k + "\":");
        return at == std::string::npos ? NAN : std::atof(last.c_str() + at + k.size() + 3);
      };
      return std::pair<double, double>{field("val_loss"), field("val_macro_f1")};
    };
    auto w1 = run_job(1, false), w2 = run_job(2, false), w4 = run_job(4, false);
    double lo = std::min({w1.first, w2.first, w4.first}), hi = std::max({w1.first, w2.first, w4.first});
    emit("convergence_val_loss_spread", (hi - lo) / lo, "fraction");
    auto raw = run_job(2, true);
    emit("aligned_val_macro_f1", w2.second, "F1", "unaligned_val_macro_f1", raw.second);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
