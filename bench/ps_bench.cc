// bench/run strategies, case ps_sync_samples_per_s_w2: Switchyard's parameter servers (sync, one
// server, two worker actors) on the railway model and a fixed batch of 32, against PyTorch's
// parameter server over torch.distributed.rpc (TensorPipe; bench/torch_ps_peer.py) on the same
// model, batch, optimizer and threads. One JSON object on stdout.
//
// Usage: ps_bench PEER_SCRIPT [STEPS]
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "yard/actors/parameter_server.h"
#include "yard/actors/trainer.h"
#include "yard/process.h"
#include "bench_util.h"
#include "yard/railway/model.h"
#include "yard/railway/shards.h"

using namespace std::chrono_literals;

namespace {

constexpr int64_t kBatch = 32, kTokens = 128, kD = 64, kLayers = 2;

// A worker's replica and its fixed batch, in this process (one thread).
struct Replica {
  RailwayNet net{nullptr};
  torch::Tensor x, y, tokens, a;
  Replica() {
    torch::set_num_threads(1);
    yard::actors::keep_freed_memory();
    torch::manual_seed(1);
    net = RailwayNet(yard::railway::kFeatures, kTokens, kD, kLayers);
    x = torch::randn({kBatch, kTokens, yard::railway::kFeatures});
    y = torch::randint(0, 5, {kBatch}, torch::kLong);
    tokens = torch::randint(0, 5, {kBatch, kTokens}, torch::kLong);
    a = torch::randn({kBatch});
  }
  torch::Tensor loss() { return railway_loss(net->forward(x), y, tokens, a, torch::ones({5})); }
};

// One worker: its replica on a fixed batch, pushing to and pulling from the servers.
class PsBenchWorker {
 public:
  PsBenchWorker() = default;
  // Trains warm-up + steps steps; returns the seconds of the last `steps`.
  double run(std::vector<yard::ActorHandle<yard::actors::ParameterServer>> servers, int worker, int workers, int steps) {
    Replica r;
    yard::actors::ParameterClient client(r.net.ptr(), std::move(servers), worker);
    if (worker == 0) {
      yard::actors::PsShardConfig cfg;
      cfg.workers = workers;
      cfg.base_lr = 1e-3;
      cfg.weight_decay = 0.01;  // AdamW's default, as the peer's
      client.initialise(cfg);
    }
    client.pull();
    return yard::bench::timed([&] { client.step({kBatch}, [&](size_t) { return r.loss(); }); }, steps);
  }
  // The same replica's forward and backward alone, without any server: what a worker computes per
  // step, the ceiling beneath every parameter server. Seconds of the last `steps`.
  double compute(int steps) {
    Replica r;
    return yard::bench::timed(
        [&] {
          r.net->zero_grad();
          r.loss().backward();
        },
        steps);
  }
};

double run_peer(const std::string& script, int steps) {
  std::string out = "/tmp/yard-ps-bench-torch-" + std::to_string(getpid());
  yard::sys::SpawnOptions so;
  so.env = yard::sys::allocator_environment();  // the heap our side runs on
  so.env.insert({{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}});
  so.death_signal = SIGKILL;
  pid_t p = yard::sys::spawn({"/usr/bin/python3", script, std::to_string(yard::sys::free_port("127.0.0.1")),
                              std::to_string(kD), std::to_string(kLayers), std::to_string(kBatch), std::to_string(steps), out},
                             so);
  waitpid(p, nullptr, 0);
  double v = 0;
  std::ifstream(out) >> v;
  std::remove(out.c_str());
  return v;
}

double run_ours(int steps) {
  std::vector<yard::ActorHandle<yard::actors::ParameterServer>> servers{
      yard::actor<yard::actors::ParameterServer>(yard::actors::PsRecovery{})
          .max_concurrency(4, yard::Concurrency::kFibers)
          .remote()};
  std::vector<yard::ActorHandle<PsBenchWorker>> workers;
  for (int w = 0; w < 2; ++w) workers.push_back(yard::actor<PsBenchWorker>().resources({{"CPU", 1}}).remote());
  std::vector<yard::ObjectRef<double>> secs;
  for (int w = 0; w < 2; ++w) secs.push_back(workers[w].call(&PsBenchWorker::run).remote(servers, w, 2, steps));
  double slowest = 0;
  for (auto& s : secs) slowest = std::max(slowest, *s.get(600s));
  for (auto& w : workers) yard::kill(w);
  yard::kill(servers[0]);
  return 2.0 * kBatch * steps / slowest;
}

// Two workers computing at once without servers: samples per second.
double compute_cap(int steps) {
  std::vector<yard::ActorHandle<PsBenchWorker>> workers;
  for (int w = 0; w < 2; ++w) workers.push_back(yard::actor<PsBenchWorker>().resources({{"CPU", 1}}).remote());
  std::vector<yard::ObjectRef<double>> secs;
  for (auto& w : workers) secs.push_back(w.call(&PsBenchWorker::compute).remote(steps));
  double slowest = 0;
  for (auto& s : secs) slowest = std::max(slowest, *s.get(600s));
  for (auto& w : workers) yard::kill(w);
  return 2.0 * kBatch * steps / slowest;
}

}  // namespace

YARD_ACTOR(PsBenchWorker, &PsBenchWorker::run, &PsBenchWorker::compute);

int main(int argc, char** argv) {
  yard::bench::init_training_cluster(argc, argv);
  std::string script = argc > 1 ? argv[1] : "bench/torch_ps_peer.py";
  int steps = argc > 2 ? std::atoi(argv[2]) : 60;
  // The peer on either side of ours: a drift of the machine weighs on both alike.
  double peer = run_peer(script, steps);
  double ours = run_ours(steps);
  peer = (peer + run_peer(script, steps)) / 2;
  // The workers' compute alone: no parameter server, ours or any, passes it, so cap ÷ peer is
  // the most any could reach against this peer in this run.
  double cap = compute_cap(steps);
  std::printf("{\"suite\":\"strategies\",\"case\":\"ps_sync_samples_per_s_w2\",\"value\":%.4g,\"unit\":\"samples/s\","
              "\"peer\":\"torch_rpc_parameter_server_sync\",\"peer_value\":%.4g,\"ratio\":%.4g,"
              "\"workers_compute_only_samples_per_s\":%.4g,\"most_ratio_any_server\":%.4g,"
              "\"settings\":{\"model\":\"railway d64 x2\",\"batch\":%lld,\"workers\":2,\"servers\":1,\"optimizer\":"
              "\"adamw\",\"torch_threads\":1,\"OMP_NUM_THREADS\":\"1\",\"OPENBLAS_NUM_THREADS\":\"1\",\"allocator\":\"jemalloc, freed memory kept, both sides\"}}\n",
              ours, peer, ours / peer, cap, cap / peer, static_cast<long long>(kBatch));
  return 0;
}
