// Data-parallel training over yard::collective, ranks as threads. c10 brings glog, whose CHECK
// macro would shadow Catch's: this file uses Catch's prefixed macros.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "support.h"
#include "yard/actors/ddp.h"
#include "yard/actors/local_sgd.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"

using namespace yard;
using namespace yard::actors;

namespace {

// LibTorch's default generator is process-wide: ranks (threads) seed and draw one at a time.
std::mutex g_rng_mu;

std::shared_ptr<torch::nn::SequentialImpl> make_model(uint64_t seed) {
  std::lock_guard<std::mutex> l(g_rng_mu);
  torch::manual_seed(seed);
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

// Single-process reference: the whole batch, plain SGD.
std::vector<torch::Tensor> reference(int steps) {
  Data d;
  auto m = make_model(7);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(m->forward(d.x), d.y).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Runs `train` as ranks 0 and 1 of `group` on two threads; returns each rank's parameters after
// it (train returns the model it trained). An exception on either rank fails the test.
using RankFn = std::function<std::shared_ptr<torch::nn::Module>(int rank, collective::Communicator& comm)>;
std::vector<std::vector<torch::Tensor>> two_ranks(const std::string& group, const RankFn& train) {
  torch::set_num_threads(1);
  std::vector<std::vector<torch::Tensor>> result(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        collective::GroupSpec s;
        s.name = group;
        s.world_size = 2;
        s.rank = r;
        s.rendezvous = test::shared_rendezvous();
        auto comm = collective::create_group(s);
        auto m = train(r, *comm);
        for (auto& p : m->parameters()) result[r].push_back(p.detach().clone());
        comm->destroy();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors) CATCH_REQUIRE(e.empty());
  return result;
}

// Two ranks, uneven halves of the batch (5 and 3 rows); rank 1 starts from other weights and is
// brought in line by the broadcast. Returns rank 0's parameters.
std::vector<torch::Tensor> ddp(int steps, DdpOptions o, const std::string& group, bool accumulate = false) {
  auto result = two_ranks(group, [&](int r, collective::Communicator& comm) {
    Data d;
    auto m = make_model(r == 0 ? 7 : 99);
    DistributedDataParallel dp(m, comm, o);
    dp.broadcast_state(0);
    torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
    auto rows = r == 0 ? d.x.slice(0, 0, 5) : d.x.slice(0, 5, 8);
    auto ys = r == 0 ? d.y.slice(0, 0, 5) : d.y.slice(0, 5, 8);
    int64_t n = rows.size(0);
    for (int st = 0; st < steps; ++st) {
      opt.zero_grad();
      if (accumulate && n > 1) {
        // Two micro-batches: the first only accumulates; each loss is its share of the local mean.
        auto half = n / 2;
        dp.set_no_sync(true);
        (torch::mse_loss(m->forward(rows.slice(0, 0, half)), ys.slice(0, 0, half), torch::Reduction::Sum) /
         (n * 3)).backward();
        dp.set_no_sync(false);
        dp.begin_step(n);
        (torch::mse_loss(m->forward(rows.slice(0, half, n)), ys.slice(0, half, n), torch::Reduction::Sum) /
         (n * 3)).backward();
      } else {
        dp.begin_step(n);
        torch::mse_loss(m->forward(rows), ys).backward();
      }
      dp.finish_step();
      opt.step();
    }
    return m;
  });
  for (size_t i = 0; i < result[0].size(); ++i) CATCH_REQUIRE(torch::equal(result[0][i], result[1][i]));  // replicas agree
  return result[0];
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

}  // namespace

namespace {
// Two ranks with uneven shards (5 and 3 rows), rank 1 starting from other weights, plain SGD with
// `momentum`; averaging every `every` steps for `steps` steps. Returns both ranks' parameters.
std::vector<std::vector<torch::Tensor>> local_sgd(int steps, int every, const std::string& group, double momentum = 0) {
  return two_ranks(group, [&](int r, collective::Communicator& comm) {
    Data d;
    auto m = make_model(r == 0 ? 7 : 99);
    PeriodicAveraging avg(m, comm, every);
    avg.broadcast_state(0);
    torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1).momentum(momentum));
    auto rows = r == 0 ? d.x.slice(0, 0, 5) : d.x.slice(0, 5, 8);
    auto ys = r == 0 ? d.y.slice(0, 0, 5) : d.y.slice(0, 5, 8);
    for (int st = 0; st < steps; ++st) {
      opt.zero_grad();
      torch::mse_loss(m->forward(rows), ys).backward();
      opt.step();
      bool averaged = avg.step_done(rows.size(0));
      if (averaged != ((st + 1) % every == 0)) throw std::runtime_error("averaged at the wrong step");
    }
    return m;
  });
}
}  // namespace

CATCH_TEST_CASE("periodic averaging every step with SGD is DDP; every H steps the replicas meet", "[trainer][local-sgd]") {
  auto ref = reference(5);
  auto one = local_sgd(5, 1, "local-sgd-1");
  CATCH_CHECK(max_diff(one[0], one[1]) == 0);
  CATCH_CHECK(max_diff(ref, one[0]) < 1e-5);
  CATCH_CHECK(max_diff(ddp(5, {}, "local-sgd-ddp"), one[0]) < 1e-5);
  // Every 3 steps: identical after 6, apart after 4 (each trained alone since the 3rd), and not
  // the same training as averaging every step.
  auto six = local_sgd(6, 3, "local-sgd-3a");
  CATCH_CHECK(max_diff(six[0], six[1]) == 0);
  CATCH_CHECK(max_diff(six[0], local_sgd(6, 1, "local-sgd-1b")[0]) > 1e-4);
  auto four = local_sgd(4, 3, "local-sgd-3b");
  CATCH_CHECK(max_diff(four[0], four[1]) > 1e-4);
  // Momentum stays local; the replicas still meet at every average.
  auto mom = local_sgd(6, 2, "local-sgd-mom", 0.9);
  CATCH_CHECK(max_diff(mom[0], mom[1]) == 0);
  collective::GroupSpec one_rank;
  one_rank.name = "local-sgd-alone";
  one_rank.rendezvous = test::shared_rendezvous();
  auto alone = collective::create_group(one_rank);
  CATCH_CHECK_THROWS_AS(PeriodicAveraging(make_model(1), *alone, 0), std::invalid_argument);
  alone->destroy();
}

CATCH_TEST_CASE("DDP on uneven shards equals single-process training on the whole batch", "[trainer][ddp]") {
  auto ref = reference(5);
  auto got = ddp(5, {}, "ddp-eq");
  CATCH_CHECK(max_diff(ref, got) < 1e-5);
}

CATCH_TEST_CASE("bucketing on and off, overlap on and off, agree", "[trainer][ddp]") {
  auto ref = reference(3);
  DdpOptions tiny;
  tiny.bucket_bytes = 64;  // a bucket per parameter
  DdpOptions late;
  late.overlap = false;
  CATCH_CHECK(max_diff(ref, ddp(3, tiny, "ddp-tiny")) < 1e-5);
  CATCH_CHECK(max_diff(ref, ddp(3, late, "ddp-late")) < 1e-5);
}

CATCH_TEST_CASE("gradient accumulation with no_sync gives the same step", "[trainer][ddp]") {
  auto ref = reference(3);
  CATCH_CHECK(max_diff(ref, ddp(3, {}, "ddp-accum", true)) < 1e-5);
}

CATCH_TEST_CASE("a checkpoint restored continues bit for bit", "[trainer][checkpoint]") {
  torch::set_num_threads(1);
  Data d;
  auto train = [&](std::shared_ptr<torch::nn::SequentialImpl> m, torch::optim::AdamW& opt, int steps) {
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      torch::mse_loss(m->forward(d.x), d.y).backward();
      opt.step();
    }
  };
  auto m = make_model(3);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(0.01));
  train(m, opt, 3);
  auto model_blob = state_bytes(*m), opt_blob = state_bytes(opt);
  train(m, opt, 4);
  auto m2 = make_model(999);
  torch::optim::AdamW opt2(m2->parameters(), torch::optim::AdamWOptions(0.01));
  load_state(*m2, model_blob);
  load_state(opt2, opt_blob);
  train(m2, opt2, 4);
  auto p1 = m->parameters(), p2 = m2->parameters();
  for (size_t i = 0; i < p1.size(); ++i) CATCH_CHECK(torch::equal(p1[i], p2[i]));
}

CATCH_TEST_CASE("a state snapshot serialises later to the bytes of the moment it was taken", "[trainer][checkpoint]") {
  torch::set_num_threads(1);
  Data d;
  auto check = [&](auto make_opt, const char* kind) {
    CATCH_INFO(kind);
    std::shared_ptr<torch::nn::SequentialImpl> m;
    {
      std::lock_guard<std::mutex> l(g_rng_mu);
      torch::manual_seed(5);
      // A layer that holds buffers too (running statistics).
      m = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16),
                                                      torch::nn::Tanh(), torch::nn::Linear(16, 3));
    }
    auto opt = make_opt(m->parameters());
    auto train = [&](int steps) {
      for (int s = 0; s < steps; ++s) {
        opt->zero_grad();
        torch::mse_loss(m->forward(d.x), d.y).backward();
        opt->step();
      }
    };
    train(3);
    StateSnapshot sm(*m), so(*opt);
    auto want_m = state_bytes(*m), want_o = state_bytes(*opt);
    train(2);
    CATCH_CHECK(state_bytes(*m) != want_m);
    CATCH_CHECK(state_bytes(*opt) != want_o);
    std::string got_m, got_o;
    std::thread t([&] { got_m = sm.bytes(), got_o = so.bytes(); });  // as a checkpoint thread would
    t.join();
    CATCH_CHECK(got_m == want_m);
    CATCH_CHECK(got_o == want_o);
  };
  using namespace torch::optim;
  check([](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(0.01)); }, "adamw");
  check([](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(0.01).amsgrad(true)); }, "adamw amsgrad");
  check([](auto p) { return std::make_unique<Adam>(p, AdamOptions(0.01)); }, "adam");
  check([](auto p) { return std::make_unique<SGD>(p, SGDOptions(0.01).momentum(0.9)); }, "sgd momentum");
  check([](auto p) { return std::make_unique<RMSprop>(p, RMSpropOptions(0.01)); }, "rmsprop (serialised at once)");
}

CATCH_TEST_CASE("linear LR scaling with warm-up, never divided by the workers", "[trainer][lr]") {
  CATCH_CHECK(scaled_lr(0.1, 32, 128, 0, 10) == Approx(0.1));
  CATCH_CHECK(scaled_lr(0.1, 32, 128, 5, 10) == Approx(0.25));
  CATCH_CHECK(scaled_lr(0.1, 32, 128, 10, 10) == Approx(0.4));
  CATCH_CHECK(scaled_lr(0.1, 32, 128, 1000, 10) == Approx(0.4));
  CATCH_CHECK(scaled_lr(0.1, 32, 32, 3, 10) == Approx(0.1));
}

CATCH_TEST_CASE("the Trainer's step (micro-batches, DDP, schedule) equals single-process SGD on the whole batch",
                "[trainer][step]") {
  auto ref = reference(3);
  auto result = two_ranks("trainer-step", [&](int r, collective::Communicator& comm) {
    Data d;
    auto m = make_model(r == 0 ? 7 : 99);  // rank 1 is brought in line by the broadcast
    TrainerOptions o;
    o.optimizer = "sgd";
    o.momentum = 0;
    o.weight_decay = 0;
    o.clip = 0;
    o.schedule.base_lr = 0.1;  // for the global batch of 8: no scaling, no warm-up
    o.schedule.base_batch = 8;
    o.schedule.global_batch = 8;
    Trainer t(m, &comm, o);
    // Rank 0 takes rows 0-4 as two micro-batches (2 + 3), rank 1 rows 5-7 as one.
    std::vector<int64_t> sizes = r == 0 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3};
    int64_t first = r == 0 ? 0 : 5;
    for (int st = 0; st < 3; ++st) {
      double sum = t.step(sizes, [&](size_t i) {
        int64_t from = first;
        for (size_t k = 0; k < i; ++k) from += sizes[k];
        return torch::mse_loss(m->forward(d.x.slice(0, from, from + sizes[i])), d.y.slice(0, from, from + sizes[i]));
      });
      CATCH_CHECK(sum > 0);
    }
    CATCH_CHECK(t.global_step() == 3);
    CATCH_CHECK(t.last_lr() == Approx(0.1));
    return m;
  });
  CATCH_CHECK(max_diff(ref, result[0]) < 1e-5);
  CATCH_CHECK(max_diff(result[0], result[1]) == 0);
}

CATCH_TEST_CASE("every rank's measured rate travels with its gradients; a slower rank measures less",
                "[trainer][shares]") {
  std::vector<std::vector<std::vector<double>>> rates(2);  // per rank, per step: group_rates()
  std::vector<std::vector<double>> busy(2), wait(2);
  two_ranks("trainer-rates", [&](int r, collective::Communicator& comm) {
    Data d;
    auto m = make_model(7);
    TrainerOptions o;
    o.optimizer = "sgd";
    o.clip = 0;
    Trainer t(m, &comm, o);
    int64_t first = r == 0 ? 0 : 4;
    for (int st = 0; st < 4; ++st) {
      t.begin_busy();
      // Rank 1 is a slower machine: every step of its 4 samples takes 40 ms more.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
      t.step({4}, [&](size_t) { return torch::mse_loss(m->forward(d.x.slice(0, first, first + 4)), d.y.slice(0, first, first + 4)); });
      rates[r].push_back(t.group_rates());
      busy[r].push_back(t.last_busy_s());
      wait[r].push_back(t.last_wait_s());
    }
    return m;
  });
  // Both ranks read the same rates, exactly; the first step carries none (nothing measured yet).
  for (int st = 0; st < 4; ++st) CATCH_CHECK(rates[0][st] == rates[1][st]);
  CATCH_CHECK(rates[0][0] == std::vector<double>{0, 0});
  // From the second step each rank's rate of the step before: samples over its busy seconds.
  for (int st = 1; st < 4; ++st) {
    CATCH_REQUIRE(rates[0][st].size() == 2);
    CATCH_CHECK(rates[1][st][1] == Approx(4 / busy[1][st - 1]).epsilon(1e-4));
    CATCH_CHECK(rates[0][st][0] > 3 * rates[0][st][1]);
  }
  // The sleep is the slow rank's busy time, not its wait; the fast rank waits for it.
  for (int st = 1; st < 4; ++st) {
    CATCH_CHECK(busy[1][st] >= 0.04);
    CATCH_CHECK(wait[0][st] > wait[1][st]);
  }
}

CATCH_TEST_CASE("a single-replica Trainer accumulates micro-batches into the whole batch's step", "[trainer][step]") {
  torch::set_num_threads(1);
  auto ref = reference(2);
  Data d;
  auto m = make_model(7);
  TrainerOptions o;
  o.optimizer = "sgd";
  o.momentum = 0;
  o.weight_decay = 0;
  o.clip = 0;
  o.schedule.base_lr = 0.1;
  Trainer t(m, nullptr, o);
  for (int st = 0; st < 2; ++st)
    t.step({4, 4}, [&](size_t i) {
      auto rows = d.x.slice(0, static_cast<int64_t>(i) * 4, static_cast<int64_t>(i) * 4 + 4);
      return torch::mse_loss(m->forward(rows), d.y.slice(0, static_cast<int64_t>(i) * 4, static_cast<int64_t>(i) * 4 + 4));
    });
  std::vector<torch::Tensor> got;
  for (auto& p : m->parameters()) got.push_back(p.detach().clone());
  CATCH_CHECK(max_diff(ref, got) < 1e-5);
  CATCH_CHECK_THROWS_WITH(Trainer(m, nullptr, [] {
                            TrainerOptions b;
                            b.optimizer = "lbfgs";
                            return b;
                          }()),
                          Catch::Contains("unknown optimizer 'lbfgs'"));
}
