// Parameter servers on a real embedded cluster: the servers are actors (their own processes),
// the workers are threads of this driver, each with its own replica. Sync equals single-process
// training on the global batch; async with one worker equals single-process training; ssp:K holds
// a slowed worker's peer to at most K steps ahead, where async lets it run on.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "yard/actors/checkpointer.h"
#include "yard/actors/parameter_server.h"
#include "yard/yard.h"

using namespace yard;
using namespace yard::actors;
using namespace std::chrono_literals;

void yard_test_worker_hook(int argc, char** argv) {
  InitOptions o;
  o.num_cpus = 2;
  init(o, argc, argv);
}

namespace {

std::mutex g_rng_mu;  // LibTorch's generator is process-wide

std::shared_ptr<torch::nn::SequentialImpl> make_model() {
  std::lock_guard<std::mutex> l(g_rng_mu);
  torch::manual_seed(7);
  return std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 3));
}

struct Data {
  torch::Tensor x, y;
  Data() {
    std::lock_guard<std::mutex> l(g_rng_mu);
    torch::manual_seed(1234);
    x = torch::randn({8, 8});
    y = torch::randn({8, 3});
  }
};

PsShardConfig config(const std::string& mode, int workers, const std::string& optimizer) {
  PsShardConfig c;
  c.mode = mode;
  c.workers = workers;
  c.optimizer = optimizer;
  c.base_lr = 0.05;
  c.weight_decay = 0.01;
  c.momentum = 0.9;
  c.wait_ms = 60000;
  return c;
}

std::vector<torch::Tensor> params_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Single-process training on the whole batch with the servers' optimizer.
std::vector<torch::Tensor> reference(int steps, const std::string& optimizer) {
  Data d;
  auto m = make_model();
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (optimizer == "adamw")
    opt = std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(0.05).weight_decay(0.01));
  else
    opt = std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    torch::mse_loss(m->forward(d.x), d.y).backward();
    opt->step();
  }
  return params_of(*m);
}

std::vector<ActorHandle<ParameterServer>> servers(int n) {
  std::vector<ActorHandle<ParameterServer>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(actor<ParameterServer>(PsRecovery{}).max_concurrency(8, Concurrency::kFibers).remote());
  return out;
}

struct WorkerRun {
  std::vector<torch::Tensor> params;
  std::vector<PsStepStats> stats;
  std::string error;
};

// Worker w of `rows.size()` trains `steps` steps on its rows of the data, as a thread; worker 0
// sets the servers up first. slow_ms: a pause in each of worker 1's steps (a slower machine).
std::vector<WorkerRun> train(const std::vector<ActorHandle<ParameterServer>>& ps, const PsShardConfig& cfg,
                             const std::vector<std::pair<int64_t, int64_t>>& rows, int steps, int slow_ms = 0) {
  torch::set_num_threads(1);
  std::vector<WorkerRun> runs(rows.size());
  auto first = make_model();
  ParameterClient(first, ps, 0).initialise(cfg);
  std::vector<std::thread> ts;
  for (size_t w = 0; w < rows.size(); ++w)
    ts.emplace_back([&, w] {
      try {
        Data d;
        auto m = make_model();
        ParameterClient client(m, ps, static_cast<int>(w));
        client.pull();
        auto [from, to] = rows[w];
        auto x = d.x.slice(0, from, to), y = d.y.slice(0, from, to);
        for (int s = 0; s < steps; ++s) {
          client.step({to - from}, [&](size_t) {
            if (w == 1 && slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
            return torch::mse_loss(m->forward(x), y);
          });
          runs[w].stats.push_back(client.last());
        }
        runs[w].params = params_of(*m);
      } catch (const std::exception& e) {
        runs[w].error = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& r : runs) {
    CATCH_INFO(r.error);
    CATCH_REQUIRE(r.error.empty());
  }
  return runs;
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

}  // namespace

CATCH_TEST_CASE("sync parameter servers train as one process on the global batch (uneven shards)", "[ps][sync]") {
  auto ps = servers(2);
  auto runs = train(ps, config("sync", 2, "adamw"), {{0, 5}, {5, 8}}, 4);
  auto ref = reference(4, "adamw");
  CATCH_CHECK(max_diff(runs[0].params, ref) < 1e-5);
  CATCH_CHECK(max_diff(runs[1].params, ref) < 1e-5);
  for (auto& r : runs)
    for (auto& s : r.stats) {
      CATCH_CHECK(s.max_ahead == 0);
      CATCH_CHECK(s.max_stale_updates == 0);
    }
  CATCH_CHECK(*ps[1].call(&ParameterServer::version).remote().get(60s) == 4);
}

CATCH_TEST_CASE("async parameter servers with one worker train as one process", "[ps][async]") {
  auto ps = servers(3);
  auto runs = train(ps, config("async", 1, "sgd"), {{0, 8}}, 5);
  CATCH_CHECK(max_diff(runs[0].params, reference(5, "sgd")) < 1e-5);
}

CATCH_TEST_CASE("ssp:1 keeps a worker at most one step ahead of a slowed one; async lets it run on", "[ps][ssp]") {
  constexpr int kSteps = 8;
  auto ssp = train(servers(2), config("ssp:1", 2, "sgd"), {{0, 4}, {4, 8}}, kSteps, 30);
  int64_t fast_most = 0;
  for (auto& r : ssp)
    for (auto& s : r.stats) CATCH_CHECK(s.max_ahead <= 1);
  for (auto& s : ssp[0].stats) fast_most = std::max(fast_most, s.max_ahead);
  CATCH_CHECK(fast_most == 1);  // the bound was reached, not merely never tested

  auto async = train(servers(2), config("async", 2, "sgd"), {{0, 4}, {4, 8}}, kSteps, 30);
  int64_t ahead = 0, stale = 0;
  for (auto& s : async[0].stats) ahead = std::max(ahead, s.max_ahead);
  for (auto& s : async[1].stats) stale = std::max(stale, s.max_stale_updates);
  CATCH_CHECK(ahead > 1);
  CATCH_CHECK(stale > 0);  // the slowed worker's gradients met updates made since its pull
}

namespace {

// A checkpointer in a fresh directory, removed again at the end.
struct CheckpointDir {
  std::filesystem::path dir;
  ActorHandle<Checkpointer> keeper;
  explicit CheckpointDir(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("yard-ps-" + name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    keeper = actor<Checkpointer>(dir.string(), int64_t{3}, "ps-" + name + "-" + std::to_string(getpid())).remote();
  }
  ~CheckpointDir() {
    try {
      kill(keeper);
    } catch (const Error&) {
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::vector<ActorHandle<ParameterServer>> restartable_servers(int n, const PsShardConfig& cfg, const CheckpointDir& ck) {
  std::vector<ActorHandle<ParameterServer>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(actor<ParameterServer>(PsRecovery{cfg, {ck.keeper}, "ps-shard-" + std::to_string(i)})
                      .max_concurrency(8, Concurrency::kFibers)
                      .max_restarts(2)
                      .remote());
  return out;
}

}  // namespace

// Sync, 2 servers, 2 workers: a checkpoint of both shards after step 3, then kill -9 of server 1
// while worker 0 waits on it in step 6. Server 1 comes back with its checkpointed shard (version
// 3), the cut-off calls are made again, and both workers finish all 8 steps on the same weights:
// server 1 applied steps 6-8 on top of its checkpoint (6 updates), server 0 all 8.
CATCH_TEST_CASE("a parameter server killed in training restarts from its shard's checkpoint; the workers carry on",
                "[ps][restart]") {
  constexpr int kSteps = 8, kCheckpointAfter = 3, kKillIn = 6;
  CheckpointDir ck("restart");
  auto cfg = config("sync", 2, "adamw");
  auto ps = restartable_servers(2, cfg, ck);
  auto first = make_model();
  ParameterClient setup(first, ps, 0);
  setup.initialise(cfg);
  int victim = setup.server_pids()[1];
  std::string saved_shard;  // server 1's shard in the checkpoint
  std::string restored;     // server 1's state read just after its restart
  std::vector<WorkerRun> runs(2);
  std::vector<std::vector<std::pair<size_t, PsRestored>>> seen(2);
  std::vector<std::thread> ts;
  for (int w = 0; w < 2; ++w)
    ts.emplace_back([&, w] {
      try {
        Data d;
        auto m = make_model();
        ParameterClient client(m, ps, w);
        client.pull();
        auto x = d.x.slice(0, 4 * w, 4 * w + 4), y = d.y.slice(0, 4 * w, 4 * w + 4);
        for (int s = 1; s <= kSteps; ++s) {
          client.step({4}, [&](size_t) {
            if (w == 1 && s == kKillIn) {
              CATCH_REQUIRE(::kill(victim, SIGKILL) == 0);
              restored = client.snapshots()[1];  // made again against the restarted server
            }
            return torch::mse_loss(m->forward(x), y);
          });
          if (w == 0 && s == kCheckpointAfter) {
            auto shards = client.snapshots();
            saved_shard = shards[1];
            CheckpointData c{static_cast<uint64_t>(s), {{"ps-shard-0", shards[0]}, {"ps-shard-1", shards[1]}}};
            ck.keeper.call(&Checkpointer::save).remote(c).get(60s);
          }
          auto r = client.take_restarts();
          seen[w].insert(seen[w].end(), r.begin(), r.end());
        }
        runs[w].params = params_of(*m);
      } catch (const std::exception& e) {
        runs[w].error = e.what();
      }
    });
  for (auto& t : ts) t.join();
  CATCH_INFO("worker 0: " << runs[0].error << "\nworker 1: " << runs[1].error);
  CATCH_REQUIRE((runs[0].error.empty() && runs[1].error.empty()));
  // The restarted server holds the checkpoint's shard: weights, optimizer state and version.
  auto want = ParameterShard::from_saved(saved_shard, cfg), got = ParameterShard::from_saved(restored, cfg);
  CATCH_CHECK(got->version() == kCheckpointAfter);
  CATCH_CHECK(torch::equal(got->weights(), want->weights()));
  auto info = *ps[1].call(&ParameterServer::restored).remote().get(60s);
  CATCH_CHECK(info.restarts == 1);
  CATCH_CHECK(info.step == kCheckpointAfter);
  CATCH_CHECK(info.version == kCheckpointAfter);
  CATCH_CHECK(info.pid != victim);
  CATCH_CHECK(*ps[1].call(&ParameterServer::version).remote().get(60s) == kCheckpointAfter + (kSteps - kKillIn + 1));
  CATCH_CHECK(*ps[0].call(&ParameterServer::version).remote().get(60s) == kSteps);
  CATCH_CHECK(max_diff(runs[0].params, runs[1].params) == 0);  // both took the servers' last weights
  // Each worker's client saw the restart once, as the server tells it.
  for (auto& v : seen) {
    CATCH_REQUIRE(v.size() == 1);
    CATCH_CHECK(v[0].first == 1);
    CATCH_CHECK(v[0].second.step == kCheckpointAfter);
  }
}

// A server lost before any checkpoint holds its shard cannot come back: its clients are told why.
CATCH_TEST_CASE("a parameter server lost before its first checkpoint fails its clients with the reason", "[ps][restart]") {
  CheckpointDir ck("nockpt");
  auto cfg = config("async", 1, "sgd");
  auto ps = restartable_servers(1, cfg, ck);
  auto m = make_model();
  ParameterClient client(m, ps, 0);
  client.initialise(cfg);
  CATCH_REQUIRE(::kill(client.server_pids()[0], SIGKILL) == 0);
  Data d;
  std::string error;
  try {
    for (int s = 0; s < 100; ++s) client.step({8}, [&](size_t) { return torch::mse_loss(m->forward(d.x), d.y); });
  } catch (const ActorDied& e) {
    error = e.what();
  }
  CATCH_INFO(error);
  CATCH_CHECK(error.find("no checkpoint holds its shard 'ps-shard-0'") != std::string::npos);
}
