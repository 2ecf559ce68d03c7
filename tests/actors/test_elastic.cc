// An elastic training group on a real cluster (a head and node managers, each a `yard start`
// process): 2 replicas grow to 3 when a node joins, shrink to 2 when that node is drained, lose
// one to kill -9 and regrow. Afterwards the weights equal a single-process reference that took
// the same global batches at the same learning rates (the arithmetic of a resize is exact), every
// sample was seen exactly once per epoch, and no checkpoint was read. This binary is the driver
// and the workers' binary. c10 brings glog, whose CHECK macro would shadow Catch's.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "yard/internal/session.h"
#include "support.h"
#include "yard/actors/elastic_group.h"
#include "yard/actors/sampler.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"
#include "yard/collective.h"
#include "yard/process.h"
#include "yard/yard.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using yard::actors::ElasticForm;
using yard::actors::ElasticGroup;
using yard::actors::ElasticJoined;

namespace {

constexpr int64_t kSamples = 97, kBatch = 4, kMin = 2, kMax = 3, kResizeWarmup = 3;
constexpr double kLr = 0.01;

std::shared_ptr<torch::nn::SequentialImpl> make_model() {
  torch::manual_seed(7);
  auto m = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 3));
  // Double precision: what is left between the group and the reference is rounding (about 1e-15),
  // far below what a wrong batch, rate or state would leave (about 1e-3).
  m->to(torch::kFloat64);
  return m;
}

struct Data {
  torch::Tensor x, y;
  Data() {
    torch::manual_seed(1234);
    x = torch::randn({kSamples, 8}, torch::kFloat64);
    y = torch::randn({kSamples, 3}, torch::kFloat64);
  }
};

yard::actors::TrainerOptions options() {
  yard::actors::TrainerOptions o;
  o.optimizer = "adamw";
  o.weight_decay = 0.01;
  o.clip = 0;
  o.schedule.base_lr = kLr;
  o.schedule.base_batch = kBatch;
  o.schedule.global_batch = kBatch * kMin;
  return o;
}

// What one step did on one replica.
struct StepRecord {
  uint64_t epoch = 0, offset = 0;  // the data position it started at
  int world = 0, rank = 0;
  int64_t step = 0;                // the global step after it
  std::vector<uint64_t> indices;
  YARD_FIELDS(epoch, offset, world, rank, step, indices);
};

class Replica {
 public:
  Replica() = default;
  int pid() { return getpid(); }
  std::string prepare() {
    torch::set_num_threads(1);
    model_ = make_model();
    trainer_ = std::make_unique<yard::actors::Trainer>(model_, nullptr, options());
    return yard::node_id();
  }
  ElasticJoined regroup(ElasticForm f) {
    auto spec = yard::collective::cluster_group("elastic-test-" + f.group, f.world, f.rank, f.generation);
    spec.timeout = std::chrono::milliseconds(f.timeout_ms);
    auto comm = yard::collective::create_group(spec);
    yard::actors::Regroup r;
    r.has_state = has_state_;
    r.global_batch = kBatch * f.world;
    r.resize_warmup = kResizeWarmup;
    r.extra = std::to_string(pos_.epoch) + " " + std::to_string(pos_.offset);
    r.restore = [this]() -> std::optional<std::pair<int64_t, std::string>> {
      ++restores_;
      return std::nullopt;  // no checkpoint in this test: a fresh start
    };
    auto g = trainer_->regroup(*comm, r);
    std::sscanf(r.extra.c_str(), "%lu %lu", &pos_.epoch, &pos_.offset);
    comm_ = std::move(comm);
    world_ = f.world;
    rank_ = f.rank;
    has_state_ = true;
    return {g.source, g.step, g.loaded, g.from_disk, static_cast<int64_t>(g.bytes)};
  }
  StepRecord step() {
    StepRecord rec{pos_.epoch, pos_.offset, world_, rank_, 0, sampler_.elastic_batch(pos_.epoch, pos_.offset, world_, rank_, kBatch)};
    auto ix = torch::tensor(std::vector<int64_t>(rec.indices.begin(), rec.indices.end()), torch::kLong);
    trainer_->step({static_cast<int64_t>(rec.indices.size())},
                   [&](size_t) { return torch::mse_loss(model_->forward(data_.x.index_select(0, ix)), data_.y.index_select(0, ix)); });
    pos_.advance(world_, kBatch, sampler_.epoch_size());
    rec.step = trainer_->global_step();
    return rec;
  }
  std::vector<double> weights() {
    std::vector<double> out;
    for (auto& p : model_->parameters()) {
      auto t = p.detach().contiguous();
      out.insert(out.end(), t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
    return out;
  }
  int restores() { return restores_; }
  // A collective that fails on `rank` with every process alive (as a timeout between hosts would).
  int fail_on(int rank) {
    if (rank == rank_) throw yard::collective::CollectiveError("injected: a collective timed out");
    return 0;
  }

 private:
  Data data_;
  yard::actors::DistributedSampler sampler_{kSamples, 1, 0, 3};
  std::shared_ptr<torch::nn::SequentialImpl> model_;
  std::unique_ptr<yard::actors::Trainer> trainer_;
  std::unique_ptr<yard::collective::Communicator> comm_;
  yard::actors::ElasticPosition pos_;
  int world_ = 1, rank_ = 0, restores_ = 0;
  bool has_state_ = false;
};

std::string yard_bin() { return getenv("YARD_BIN"); }

// A head (the driver's node) and node managers that offer room for one replica each.
struct Cluster {
  std::string home, addr, token;
  pid_t head_pid = 0;
  std::map<std::string, pid_t> nodes;
  Cluster() {
    char tmpl[] = "/tmp/yard-elastic-test-XXXXXX";
    home = mkdtemp(tmpl);
    setenv("YARD_HOME", home.c_str(), 1);
    auto [pid, line] = yard::test::spawn_daemon({yard_bin(), "start", "--head", "--block", "--port", "0",
                                                 "--heartbeat-timeout", "2", "--session-dir", home + "/head"});
    CATCH_INFO(line);
    CATCH_REQUIRE(!line.empty());
    CATCH_REQUIRE(line.rfind("ERROR", 0) != 0);
    head_pid = pid;
    addr = line.substr(0, line.find(' '));
    token = yard::detail::read_token(home + "/head/token");
    setenv("YARD_ADDRESS", addr.c_str(), 1);
    setenv("YARD_TOKEN", token.c_str(), 1);
  }
  void add_node(const std::string& name) {
    auto [pid, line] = yard::test::spawn_daemon({yard_bin(), "start", "--address", addr, "--token", token, "--block",
                                                 "--port", "0", "--num-cpus", "1", "--resources", R"({"replica": 1})",
                                                 "--heartbeat-timeout", "2", "--session-dir", home + "/" + name});
    CATCH_INFO(line);
    CATCH_REQUIRE(!line.empty());
    CATCH_REQUIRE(line.rfind("ERROR", 0) != 0);
    nodes[name] = pid;
  }
  ~Cluster() {
    yard::shutdown();
    pid_t redis_pid = 0;
    {
      std::ifstream f(home + "/head/redis.address");
      std::string a;
      f >> a >> redis_pid;
    }
    for (auto& [n, p] : nodes) yard::detail::terminate(p, SIGTERM, 10s);
    if (head_pid) yard::detail::terminate(head_pid, SIGTERM, 10s);
    if (redis_pid > 0 && !yard::detail::process_dead(redis_pid)) yard::detail::terminate(redis_pid, SIGTERM, 5s);
    std::error_code ec;
    if (!getenv("YARD_TEST_KEEP")) fs::remove_all(home, ec);
  }
};

// The driver: steps the group one step at a time, keeping every replica's record of every step
// that completed on all of them.
struct Driver {
  ElasticGroup<Replica> group;
  std::vector<std::vector<StepRecord>> steps;  // per completed step: every rank's record
  std::vector<yard::actors::ElasticResize> resizes;
  int lost = 0;

  static ElasticGroup<Replica>::Options opts() {
    ElasticGroup<Replica>::Options o;
    o.name = "test";
    o.min = kMin;
    o.max = kMax;
    return o;
  }
  Driver()
      : group(opts(), [] { return yard::actor<Replica>().resources({{"CPU", 1}, {"replica", 1}}).remote(); },
              [](const yard::ActorHandle<Replica>& a) { return a.call(&Replica::prepare).remote(); }) {}

  void step() {
    if (auto r = group.settle(120s)) resizes.push_back(*r);
    auto out = group.run<StepRecord>([](const yard::ActorHandle<Replica>& a, int) { return a.call(&Replica::step).remote(); }, 60s);
    lost += static_cast<int>(out.lost.size());
    bool all = true;
    for (auto& r : out.by_rank) all = all && r.has_value();
    if (!all) return;  // a peer was lost: the step did not complete; the next settle regroups
    std::vector<StepRecord> recs;
    for (auto& r : out.by_rank) recs.push_back(*r);
    steps.push_back(std::move(recs));
  }
  // Steps until cond() holds (at most 60 s).
  template <class F>
  void step_until(F cond, const char* what) {
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!cond()) {
      CATCH_INFO(what);
      CATCH_REQUIRE(std::chrono::steady_clock::now() < deadline);
      step();
    }
  }
};

// The same training in one process: each step's global batch is the positions the group's ranks
// took, and the rate follows the same changes of the global batch.
std::vector<double> reference(const std::vector<std::vector<StepRecord>>& steps) {
  Data d;
  auto model = make_model();
  auto o = options();
  auto opt = yard::actors::make_optimizer(model->parameters(), o);
  yard::actors::ElasticLr lr;
  lr.base = o.schedule;
  lr.resize_warmup = kResizeWarmup;
  yard::actors::DistributedSampler sampler(kSamples, 1, 0, 3);
  int world = kMin;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& first = steps[s][0];
    if (first.world != world) lr.resize(static_cast<int64_t>(s), kBatch * first.world);
    world = first.world;
    std::vector<int64_t> idx;
    for (int r = 0; r < world; ++r)
      for (auto i : sampler.elastic_batch(first.epoch, first.offset, world, r, kBatch)) idx.push_back(static_cast<int64_t>(i));
    auto ix = torch::tensor(idx, torch::kLong);
    opt->zero_grad();
    torch::mse_loss(model->forward(d.x.index_select(0, ix)), d.y.index_select(0, ix)).backward();
    for (auto& g : opt->param_groups()) g.options().set_lr(lr.at(static_cast<int64_t>(s)));
    opt->step();
  }
  std::vector<double> out;
  for (auto& p : model->parameters()) {
    auto t = p.detach().contiguous();
    out.insert(out.end(), t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  return out;
}

}  // namespace

YARD_ACTOR(Replica, yard::ctor<>, &Replica::pid, &Replica::prepare, &Replica::regroup, &Replica::step, &Replica::weights,
           &Replica::restores, &Replica::fail_on);

void yard_test_worker_hook(int argc, char** argv) {
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
}

CATCH_TEST_CASE("an elastic group grows, shrinks on a drain, survives kill -9 and trains exactly", "[elastic]") {
  Cluster c;
  c.add_node("n1");
  c.add_node("n2");
  yard::init();
  torch::set_num_threads(1);
  Driver d;

  // Two nodes of one CPU: the group starts with MIN = 2 (the third replica waits for room).
  d.step();
  CATCH_REQUIRE(d.group.world() == 2);
  for (int i = 0; i < 4; ++i) d.step();

  // A node joins: the waiting replica is placed there and joins at a step boundary.
  c.add_node("n3");
  d.step_until([&] { return d.group.world() == 3; }, "growing to 3 replicas when n3 joins");
  for (int i = 0; i < 6; ++i) d.step();

  // The third replica's node is drained: the group lets it go at a step boundary, the drain ends.
  std::string third = d.group.node(2);
  auto drain = std::async(std::launch::async, [&] {
    return yard::test::sh(yard_bin() + " drain " + third + " --timeout 60 --address " + c.addr + " --token " + c.token);
  });
  d.step_until([&] { return d.group.world() == 2; }, "shrinking to 2 replicas when n3 is drained");
  auto drained = drain.get();
  CATCH_INFO(drained.out);
  CATCH_CHECK(drained.code == 0);
  for (int i = 0; i < 4; ++i) d.step();

  // kill -9 of a replica: the survivor waits (MIN = 2) for a new one, which gets its state.
  int victim = d.group.pid(1);
  CATCH_REQUIRE(::kill(victim, SIGKILL) == 0);
  d.step_until([&] { return d.lost > 0 && d.group.world() == 2 && d.group.pid(1) != victim; },
               "regrowing to 2 replicas after kill -9");
  for (int i = 0; i < 20; ++i) d.step();

  // The group's history: 2, 3, 2, 2 (a new member), no state ever read from disk after the start.
  std::vector<int> worlds;
  for (auto& r : d.resizes) worlds.push_back(r.new_world);
  std::string where;
  for (int r = 0; r < d.group.world(); ++r) where += " " + d.group.who(r);
  CATCH_INFO("members:" << where);
  CATCH_INFO("victim pid " << victim << ", drained " << third);
  CATCH_CHECK(worlds == std::vector<int>{2, 3, 2, 2});
  for (size_t i = 1; i < d.resizes.size(); ++i) CATCH_CHECK_FALSE(d.resizes[i].from_disk);
  // Rank 0 has been there from the start (whose fresh start counts as its one restore); rank 1
  // joined after the kill.
  CATCH_CHECK(*d.group.member(0).call(&Replica::restores).remote().get(30s) == 1);
  CATCH_CHECK(*d.group.member(1).call(&Replica::restores).remote().get(30s) == 0);

  // Every sample exactly once per finished epoch.
  std::map<uint64_t, std::multiset<uint64_t>> seen;
  for (auto& step : d.steps)
    for (auto& rec : step) seen[rec.epoch].insert(rec.indices.begin(), rec.indices.end());
  uint64_t last = d.steps.back()[0].epoch;
  CATCH_REQUIRE(last >= 2);
  for (uint64_t e = 0; e < last; ++e) {
    CATCH_INFO("epoch " << e);
    CATCH_CHECK(seen[e].size() == static_cast<size_t>(kSamples));
    CATCH_CHECK(std::set<uint64_t>(seen[e].begin(), seen[e].end()).size() == static_cast<size_t>(kSamples));
  }

  // The weights: every replica's equal the reference.
  auto want = reference(d.steps);
  for (int r = 0; r < d.group.world(); ++r) {
    auto got = *d.group.member(r).call(&Replica::weights).remote().get(30s);
    CATCH_REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
    CATCH_INFO("rank " << r << ": largest difference " << worst);
    CATCH_CHECK(worst < 1e-10);
  }

  // A call that fails on the collective with nobody lost: the same members form a new generation
  // at the next boundary, and training goes on.
  auto out = d.group.run<int>([](const yard::ActorHandle<Replica>& a, int) { return a.call(&Replica::fail_on).remote(1); },
                              30s);
  CATCH_CHECK(out.lost.empty());
  CATCH_CHECK_FALSE(out.complete());
  auto again = d.group.settle(60s);
  CATCH_REQUIRE(again);
  CATCH_CHECK(again->new_world == 2);
  CATCH_CHECK(again->why.find("collective failed") != std::string::npos);
  size_t before = d.steps.size();
  d.step();
  CATCH_CHECK(d.steps.size() == before + 1);
}
