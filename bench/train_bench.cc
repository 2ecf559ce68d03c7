// bench/run train: data-parallel training throughput against PyTorch DDP (gloo) on the same model
// (the railway Transformer: input projection, learned positions, encoder, max-pool, two heads),
// the same batch, one thread per worker, the same OpenBLAS; plus DDP efficiency and the training
// time a checkpoint costs.
//
// Both sides run with the same process settings (ProcessSettings below: thread counts, BLAS,
// the allocator), set through the environment the same way and printed in each record's
// "settings". The allocator is something Switchyard brings (every Switchyard process runs on
// jemalloc, keeping freed memory for reuse); PyTorch runs on glibc's by default, so the
// throughput cases are reported twice: against the peer as it runs by default
// ("_peer_default") and against the peer on the same allocator with the same settings (LD_PRELOAD,
// MALLOC_CONF), the comparison the targets apply to.
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "yard/railway/model.h"
#include "yard/railway/shards.h"
#include "yard/job_store.h"
#include "yard/process.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/ddp.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"

using Clock = std::chrono::steady_clock;

namespace {

// The railway model itself, its features and 128 tokens per window (the peer builds the same).
constexpr int64_t kFeatures = yard::railway::kFeatures;
struct Net : RailwayNet {
  Net(int64_t d, int64_t layers) : RailwayNet(kFeatures, 128, d, layers) {}
};

// How the ranks train: each on its own; data-parallel (DDP); or in lock step without any
// gradient exchange (a barrier after every backward): what synchronous training costs on this
// machine before any communication, the limit for DDP's efficiency.
enum class Mode { kIndependent, kDdp, kLockstep };
const char* mode_name(Mode m) { return m == Mode::kDdp ? "ddp" : m == Mode::kLockstep ? "lockstep" : "independent"; }

// The process-level settings every rank of either side runs with. `same_allocator` = the heap of
// a Switchyard process (yard::sys::allocator_environment(): jemalloc, freed memory kept), given to
// the peer through the environment, and to Switchyard's ranks the same way (which have it anyway).
struct ProcessSettings {
  bool same_allocator = true;
  bool peer_bucket_view = false;  // the peer only: DDP(gradient_as_bucket_view=True)

  std::map<std::string, std::string> env() const {
    std::map<std::string, std::string> e = {
        {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"MKL_NUM_THREADS", "1"}};
    if (peer_bucket_view) e["PEER_BUCKET_VIEW"] = "1";
    if (same_allocator)
      for (auto& [k, v] : yard::sys::allocator_environment()) e[k] = v;
    return e;
  }
  // A JSON object for the record: the environment, the intra-op threads, the BLAS library loaded.
  std::string json() const {
    std::error_code ec;
    auto blas = std::filesystem::canonical("/usr/lib/x86_64-linux-gnu/libblas.so.3", ec).string();
    std::string j = "{\"torch_threads\":1,\"blas\":\"" + (ec ? std::string("unknown") : blas) + "\"";
    for (auto& [k, v] : env()) j += ",\"" + k + "\":\"" + v + "\"";
    return j + "}";
  }
};

// One step of the model on a fixed batch, timed in four phases (TB_PROFILE prints them).
struct Replica {
  Net net;
  std::unique_ptr<yard::collective::Communicator> comm;
  std::unique_ptr<yard::actors::DistributedDataParallel> dp;
  std::unique_ptr<torch::optim::AdamW> opt;
  torch::Tensor x, y, a, tokens;
  int64_t batch;
  double ph[4] = {0, 0, 0, 0};

  Replica(int rank, int world, const std::string& redis, int64_t d, int64_t layers, int64_t batch, Mode mode)
      : net(d, layers), batch(batch) {
    if (mode != Mode::kIndependent) {
      yard::collective::GroupSpec s;
      s.name = "train-bench";
      s.world_size = world;
      s.rank = rank;
      s.rendezvous = yard::rendezvous_at(redis);
      s.generation = std::to_string(getppid()) + "-" + std::to_string(d);
      comm = yard::collective::create_group(s);
      if (mode == Mode::kDdp) {
        yard::actors::DdpOptions o;
        if (const char* mb = getenv("TB_BUCKET_MB")) o.bucket_bytes = static_cast<size_t>(atof(mb) * (1 << 20));
        dp = std::make_unique<yard::actors::DistributedDataParallel>(net.ptr(), *comm, o);
        dp->broadcast_state(0);
      }
    }
    opt = std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-3));
    x = torch::randn({batch, 128, kFeatures});
    y = torch::randint(0, 5, {batch}, torch::kLong);
    tokens = torch::randint(0, 5, {batch, 128}, torch::kLong);
    a = torch::randn({batch});
  }
  void step() {
    auto t0 = Clock::now();
    if (dp) dp->begin_step(batch);
    for (auto& p : net->parameters()) p.mutable_grad().reset();  // zero_grad(set_to_none)
    auto loss = railway_loss(net->forward(x), y, tokens, a, torch::ones({5}));
    auto t1 = Clock::now();
    loss.backward();
    auto t2 = Clock::now();
    if (dp) dp->finish_step();
    else if (comm) comm->barrier();  // lock step
    auto t3 = Clock::now();
    opt->step();
    auto t4 = Clock::now();
    ph[0] += std::chrono::duration<double>(t1 - t0).count();
    ph[1] += std::chrono::duration<double>(t2 - t1).count();
    ph[2] += std::chrono::duration<double>(t3 - t2).count();
    ph[3] += std::chrono::duration<double>(t4 - t3).count();
  }
  void barrier() {
    if (comm) comm->barrier();
  }
};

// What checkpointing every `every` steps costs the job: segments of 2 × `every` steps with and
// without checkpoints, alternating (ABBA, so a drift of the machine weighs on both alike), on the
// same ranks. Rank 0 snapshots model and optimizer on the training thread and hands them to the
// store, which serialises and writes (fsync, rename) on its background thread, competing for the
// same cores; a segment with checkpoints ends when its last write is on disk. Returns (seconds
// without, seconds with).
std::pair<double, double> checkpoint_cost(Replica& r, int rank, int every, int pairs) {
  auto dir = "/tmp/yard-train-bench-ckpt-" + std::to_string(getppid());
  std::optional<yard::actors::CheckpointStore> store;
  if (rank == 0) store.emplace(dir, 2);
  std::vector<double> handover;
  double plain = 0, with = 0;
  uint64_t written = 0;
  for (int seg = 0; seg < 4 * pairs; ++seg) {
    bool ckpt = seg % 4 == 1 || seg % 4 == 2;
    r.barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < 2 * every; ++i) {
      if (ckpt && rank == 0 && i % every == every - 1) {
        auto c0 = Clock::now();
        yard::actors::StateSnapshot model(*r.net), optimizer(*r.opt);
        uint64_t n = ++written;
        store->write_async(std::function<yard::actors::Checkpoint()>([=] {
          yard::actors::Checkpoint c;
          c.step = n;
          c.blobs["model"] = model.bytes();
          c.blobs["optimizer"] = optimizer.bytes();
          return c;
        }));
        handover.push_back(std::chrono::duration<double>(Clock::now() - c0).count() * 1e3);
      }
      r.step();
    }
    if (ckpt && rank == 0) store->wait();
    r.barrier();
    (ckpt ? with : plain) += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  store.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (getenv("TB_PROFILE") && rank == 0) {
    std::fprintf(stderr, "rank 0 checkpoint hand-overs (ms):");
    for (double t : handover) std::fprintf(stderr, " %.3f", t);
    std::fprintf(stderr, "\n");
  }
  return {plain, with};
}

// One rank: trains `steps` steps; rank 0 writes samples/s to out. TB_CKPT_EVERY=k: instead, the
// checkpoint cost above (rank 0 writes the rates without and with checkpoints).
// TB_PROFILE=1: each rank prints its milliseconds per step in each phase.
int rank_main(int rank, int world, const std::string& redis, int64_t d, int64_t layers, int64_t batch, int steps,
              Mode mode, const std::string& out, int ckpt_every) {
  torch::set_num_threads(1);
  yard::actors::keep_freed_memory();
  torch::manual_seed(1);
  Replica r(rank, world, redis, d, layers, batch, mode);
  bool sync = mode != Mode::kIndependent;
  for (int i = 0; i < 3; ++i) r.step();
  for (auto& v : r.ph) v = 0;
  if (ckpt_every > 0) {
    int pairs = std::max(1, steps / (4 * ckpt_every));
    auto [plain, with] = checkpoint_cost(r, rank, ckpt_every, pairs);
    double samples = 4.0 * pairs * ckpt_every * batch * world;  // each side's share of the steps
    r.comm->destroy();
    if (rank == 0) std::ofstream(out) << samples / plain << " " << samples / with << "\n";
    return 0;
  }
  r.barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) r.step();
  r.barrier();
  double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  if (getenv("TB_PROFILE"))
    std::fprintf(stderr, "rank %d %s ms/step: forward %.1f backward %.1f finish %.1f optimizer %.1f\n", rank,
                 mode_name(mode), r.ph[0] * 1e3 / steps, r.ph[1] * 1e3 / steps, r.ph[2] * 1e3 / steps,
                 r.ph[3] * 1e3 / steps);
  if (r.comm) r.comm->destroy();
  // Synchronised: rank 0 reports the group's rate. Independent: every rank reports its own, and
  // the rates add up.
  if (sync && rank == 0) std::ofstream(out) << steps * batch * world / dt << " 0\n";
  if (!sync) std::ofstream(out) << steps * batch / dt << " 0\n";
  return 0;
}

// Runs `world` ranks as processes with `settings`; returns rank 0's two figures (samples/s, and
// with ckpt_every > 0, samples/s without and with checkpoints).
std::pair<double, double> run_ours(int world, const std::string& redis, int64_t d, int64_t layers, int64_t batch, int steps,
                                   Mode mode, int ckpt_every = 0) {
  bool sync = mode != Mode::kIndependent;
  std::string out = "/tmp/yard-train-bench-" + std::to_string(getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    yard::sys::SpawnOptions so;
    so.env = ProcessSettings{}.env();
    std::map<std::string, std::string> tb = {
        {"TB_RANK", std::to_string(r)}, {"TB_WORLD", std::to_string(world)}, {"TB_REDIS", redis},
        {"TB_D", std::to_string(d)}, {"TB_LAYERS", std::to_string(layers)}, {"TB_BATCH", std::to_string(batch)},
        {"TB_STEPS", std::to_string(steps)}, {"TB_MODE", std::to_string(static_cast<int>(mode))},
        {"TB_CKPT_EVERY", std::to_string(ckpt_every)}, {"TB_OUT", sync || r == 0 ? out : out + ".r" + std::to_string(r)}};
    so.env.insert(tb.begin(), tb.end());
    so.death_signal = SIGKILL;
    pids.push_back(yard::sys::spawn({yard::sys::self_exe()}, so));
  }
  for (auto p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "train_bench: a %s rank failed (status %d)\n", mode_name(mode), st);
      std::exit(1);
    }
  }
  double v = 0, second = 0;
  std::ifstream(out) >> v >> second;
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
  return {v, second};
}

double run_torch(int world, int64_t d, int64_t layers, int64_t batch, int steps, const std::string& script,
                 const ProcessSettings& settings) {
  std::string out = "/tmp/yard-train-bench-torch-" + std::to_string(getpid());
  yard::sys::SpawnOptions so;
  so.env = settings.env();
  so.death_signal = SIGKILL;
  pid_t p = yard::sys::spawn({"/usr/bin/python3", script, std::to_string(world),
                                 std::to_string(yard::sys::free_port("127.0.0.1")), std::to_string(d),
                                 std::to_string(layers), std::to_string(batch), std::to_string(steps), out},
                                so);
  waitpid(p, nullptr, 0);
  double v = 0;
  std::ifstream(out) >> v;
  std::remove(out.c_str());
  return v;
}

// One record; `extra` is appended as further fields (",\"k\":v...").
void emit(const std::string& name, double v, const char* unit, const char* peer = nullptr, double pv = 0,
          const std::string& extra = "") {
  std::printf("{\"suite\":\"train\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\"", name.c_str(), v, unit);
  if (peer) std::printf(",\"peer\":\"%s\",\"peer_value\":%.4g,\"ratio\":%.4g", peer, pv, v / pv);
  std::printf("%s}\n", extra.c_str());
  std::fflush(stdout);
}

// A throughput case against the peer twice: as PyTorch runs by default, and with the same process
// settings as Switchyard's ranks plus DDP's own speed option (gradient_as_bucket_view), the
// comparison the target applies to. The peer's runs sit on either side of ours, and each figure is
// the mean of its two runs, so a drift of the machine during the case weighs on both sides alike.
void throughput_case(const std::string& name, const std::string& redis, const std::string& script, int64_t d,
                     int64_t layers, int steps) {
  ProcessSettings same, by_default;
  same.peer_bucket_view = true;
  by_default.same_allocator = false;
  double peer_same = run_torch(2, d, layers, 32, steps, script, same);
  double peer_default = run_torch(2, d, layers, 32, steps, script, by_default);
  double ours = run_ours(2, redis, d, layers, 32, steps, Mode::kDdp).first;
  ours = (ours + run_ours(2, redis, d, layers, 32, steps, Mode::kDdp).first) / 2;
  peer_default = (peer_default + run_torch(2, d, layers, 32, steps, script, by_default)) / 2;
  peer_same = (peer_same + run_torch(2, d, layers, 32, steps, script, same)) / 2;
  emit(name + "_peer_default", ours, "samples/s", "pytorch_ddp_gloo_default", peer_default,
       ",\"settings\":" + ProcessSettings{}.json() + ",\"peer_settings\":" + by_default.json());
  emit(name, ours, "samples/s", "pytorch_ddp_gloo_same_settings", peer_same,
       ",\"settings\":" + ProcessSettings{}.json() + ",\"peer_settings\":" + same.json());
}

}  // namespace

namespace {

// The small model (the demo job's), 2 ranks, a checkpoint every 20 steps: 1 - (throughput with
// checkpoints ÷ throughput without), both measured on the same ranks in alternation.
void checkpoint_stall_case(const std::string& redis) {
  const int every = 20;
  auto [plain, with] = run_ours(2, redis, 64, 2, 32, 12 * every, Mode::kDdp, every);
  emit("checkpoint_stall_frac", 1 - with / plain, "fraction", nullptr, 0,
       ",\"every_steps\":" + std::to_string(every) + ",\"samples_per_s_without\":" + std::to_string(plain) +
           ",\"samples_per_s_with\":" + std::to_string(with) + ",\"settings\":" + ProcessSettings{}.json());
}

// DDP ÷ independent trainers, with lock step alone (a barrier after every backward, no gradients
// exchanged) ÷ independent as the limit beside it. Three rounds, each running the three in a
// rotated order; the medians, so one noisy moment of this shared 2-core machine weighs on no side
// alone.
void efficiency_case(const std::string& redis) {
  std::map<Mode, std::vector<double>> rate;
  const Mode order[] = {Mode::kIndependent, Mode::kDdp, Mode::kLockstep};
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 3; ++i) {
      Mode m = order[(i + round) % 3];
      rate[m].push_back(run_ours(2, redis, 256, 4, 32, 20, m).first);
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
       median(Mode::kLockstep) / indep, ",\"settings\":" + ProcessSettings{}.json());
}

// The railway job (`job`) with `workers` trainers for 2 epochs over 64 logs of 25 km: its final
// validation loss and macro-F1 (NaN when it failed).
std::pair<double, double> run_railway_job(const std::string& job, const std::filesystem::path& dir, int workers,
                                          unsigned seed, bool unaligned) {
  std::string out = (dir / ("w" + std::to_string(workers) + "-s" + std::to_string(seed) + (unaligned ? "-raw" : ""))).string();
  std::string cmd = job + " --workers " + std::to_string(workers) + " --epochs 2 --logs 64 --length-km 25 --seed " +
                    std::to_string(seed) + " --data " + (dir / "data").string() + " --out " + out +
                    (unaligned ? " --unaligned" : "") + " > " + out + ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) return {NAN, NAN};
  std::ifstream m(out + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(m, line))
    if (line.find("\"event\":\"epoch\"") != std::string::npos) last = line;
  auto field = [&](const std::string& k) {
    auto at = last.find("\"" + k + "\":");
    return at == std::string::npos ? NAN : std::atof(last.c_str() + at + k.size() + 3);
  };
  std::filesystem::remove_all(out + "/checkpoints");
  return {field("val_loss"), field("val_macro_f1")};
}

// Convergence: the railway job with 1, 2 and 4 trainers (linear LR scaling with warm-up and a
// cosine decay), the demo's job (2 epochs over the same 64 logs of 25 km), for three seeds (the
// model's initialisation and the data order): the spread of the final validation loss across
// trainer counts, the median over the seeds (one seed's figure differs between CPUs of the same
// kind). Then the same job (2 trainers, first seed) on shards made without alignment.
void convergence_cases(const std::string& job, bool spread) {
  auto dir = std::filesystem::temp_directory_path() / ("yard-train-conv-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  double f1_w2 = NAN;
  if (spread) {
    std::vector<double> spreads;
    std::string per_seed;
    for (unsigned seed : {17u, 18u, 19u}) {
      auto w1 = run_railway_job(job, dir, 1, seed, false), w2 = run_railway_job(job, dir, 2, seed, false),
           w4 = run_railway_job(job, dir, 4, seed, false);
      if (seed == 17) f1_w2 = w2.second;
      double lo = std::min({w1.first, w2.first, w4.first}), hi = std::max({w1.first, w2.first, w4.first});
      spreads.push_back((hi - lo) / lo);
      per_seed += fmt::format("{}{{\"seed\":{},\"val_loss\":[{:.4f},{:.4f},{:.4f}],\"spread\":{:.4f}}}",
                              per_seed.empty() ? "" : ",", seed, w1.first, w2.first, w4.first, spreads.back());
    }
    std::sort(spreads.begin(), spreads.end());
    emit("convergence_val_loss_spread", spreads[spreads.size() / 2], "fraction", nullptr, 0,
         ",\"trainers\":[1,2,4],\"per_seed\":[" + per_seed + "]");
  } else {
    f1_w2 = run_railway_job(job, dir, 2, 17, false).second;
  }
  auto raw = run_railway_job(job, dir, 2, 17, true);
  emit("aligned_val_macro_f1", f1_w2, "F1", "unaligned_val_macro_f1", raw.second);
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* r = getenv("TB_RANK"))
    return rank_main(atoi(r), atoi(getenv("TB_WORLD")), getenv("TB_REDIS"), atoll(getenv("TB_D")), atoll(getenv("TB_LAYERS")),
                     atoll(getenv("TB_BATCH")), atoi(getenv("TB_STEPS")), static_cast<Mode>(atoi(getenv("TB_MODE"))),
                     getenv("TB_OUT"), atoi(getenv("TB_CKPT_EVERY")));
  std::string script = argc > 1 ? argv[1] : "bench/torch_ddp_peer.py";
  yard::RendezvousServer redis;
  // TB_ONLY=<case> runs one case (for experiments); bench/run runs them all.
  std::string only = getenv("TB_ONLY") ? getenv("TB_ONLY") : "";
  auto want = [&](const char* c) { return only.empty() || only == c; };
  if (want("ddp_samples_per_s_w2_small")) throughput_case("ddp_samples_per_s_w2_small", redis.address(), script, 64, 2, 100);
  if (want("ddp_samples_per_s_w2_large")) throughput_case("ddp_samples_per_s_w2_large", redis.address(), script, 256, 4, 20);
  if (want("checkpoint_stall_frac")) checkpoint_stall_case(redis.address());
  if (want("ddp_efficiency_w2_large")) efficiency_case(redis.address());
  if (argc > 2 && (want("convergence_val_loss_spread") || want("aligned_val_macro_f1")))
    convergence_cases(argv[2], want("convergence_val_loss_spread"));
  return 0;
}
