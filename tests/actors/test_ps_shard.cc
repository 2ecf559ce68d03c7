// The parameter server's pure parts, without processes: the shard plan, the modes, and one
// shard's arithmetic and waiting rules against single-process training.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "yard/actors/parameter_server.h"

using namespace yard::actors;

CATCH_TEST_CASE("shards hold whole tensors, balanced: none over its share plus one tensor", "[ps][plan]") {
  std::vector<int64_t> sizes{4096, 64, 4096, 64, 1024, 16, 16, 2048, 1, 300};
  for (int servers : {1, 2, 3, 4, 7}) {
    auto plan = plan_shards(sizes, servers);
    CATCH_REQUIRE(plan.size() == static_cast<size_t>(servers));
    int64_t total = 0, largest = 0;
    for (auto s : sizes) total += s, largest = std::max(largest, s);
    std::vector<int> owner(sizes.size(), -1);
    for (size_t s = 0; s < plan.size(); ++s) {
      CATCH_CHECK_FALSE(plan[s].empty());
      CATCH_CHECK(std::is_sorted(plan[s].begin(), plan[s].end()));
      int64_t load = 0;
      for (auto i : plan[s]) {
        CATCH_CHECK(owner[i] == -1);
        owner[i] = static_cast<int>(s);
        load += sizes[i];
      }
      CATCH_CHECK(load <= total / servers + largest);
    }
    for (auto o : owner) CATCH_CHECK(o >= 0);  // every tensor somewhere
  }
  CATCH_CHECK_THROWS_WITH(plan_shards({5, 5}, 3), Catch::Contains("a server would hold nothing"));
  CATCH_CHECK_THROWS_WITH(plan_shards({5, 0, 5}, 3), Catch::Contains("2 parameter tensors"));
  CATCH_CHECK_THROWS(plan_shards({5}, 0));
}

CATCH_TEST_CASE("modes parse; ssp:0 is sync; bad ones are refused by name", "[ps][mode]") {
  CATCH_CHECK(PsMode::parse("sync").kind == PsMode::Kind::kSync);
  CATCH_CHECK(PsMode::parse("async").kind == PsMode::Kind::kAsync);
  CATCH_CHECK(PsMode::parse("ssp:0").kind == PsMode::Kind::kSync);
  CATCH_CHECK(PsMode::parse("ssp:3").name() == "ssp:3");
  for (auto bad : {"", "ssp", "ssp:", "ssp:-1", "ssp:x", "asynch", "ssp:99999999"})
    CATCH_CHECK_THROWS_WITH(PsMode::parse(bad), Catch::Contains("unknown parameter-server mode"));
}

namespace {
PsShardConfig config(const std::string& mode, int workers, const std::string& opt = "adamw") {
  PsShardConfig c;
  c.mode = mode;
  c.workers = workers;
  c.optimizer = opt;
  c.base_lr = 0.05;
  c.weight_decay = 0.01;
  return c;
}
}  // namespace

CATCH_TEST_CASE("a sync shard applies the batch-weighted mean of all workers' gradients as one step", "[ps][shard]") {
  torch::manual_seed(3);
  auto w0 = torch::randn({10});
  auto g1 = torch::randn({10}), g2 = torch::randn({10});
  ParameterShard shard(w0, config("sync", 2));
  // Reference: one AdamW step on the global-batch mean (batches 3 and 1).
  auto ref = w0.clone().set_requires_grad(true);
  torch::optim::AdamW opt({ref}, torch::optim::AdamWOptions(0.05).weight_decay(0.01));
  ref.mutable_grad() = (g1 * 3 + g2 * 1) / 4;
  opt.step();

  CATCH_CHECK(shard.may_pull(0));
  (void)shard.pull(0);
  (void)shard.pull(1);
  auto a = shard.push(0, 3, g1);
  CATCH_CHECK(a.version == 0);       // waiting for worker 1
  CATCH_CHECK_FALSE(shard.may_pull(0));
  CATCH_CHECK_THROWS_WITH(shard.push(0, 3, g1), Catch::Contains("before the update of its previous step"));
  auto b = shard.push(1, 1, g2);
  CATCH_CHECK(b.version == 1);
  CATCH_CHECK(shard.may_pull(0));
  CATCH_CHECK(shard.may_pull(1));
  CATCH_CHECK(torch::allclose(shard.pull(0), ref.detach(), 1e-6, 1e-6));
  CATCH_CHECK(a.stale_updates == 0);
  CATCH_CHECK(b.ahead == 0);
}

CATCH_TEST_CASE("an async shard applies each push at once and counts the updates a worker missed", "[ps][shard]") {
  torch::manual_seed(4);
  auto w0 = torch::randn({6});
  ParameterShard shard(w0, config("async", 2, "sgd"));
  auto ref = w0.clone().set_requires_grad(true);
  torch::optim::SGD opt({ref}, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
  (void)shard.pull(0);
  (void)shard.pull(1);
  for (int i = 0; i < 3; ++i) {
    auto g = torch::randn({6});
    auto ack = shard.push(0, 4, g);
    CATCH_CHECK(ack.version == i + 1);
    CATCH_CHECK(ack.stale_updates == 0);  // worker 0 alone
    ref.mutable_grad() = g;
    opt.step();
    CATCH_CHECK(shard.may_pull(0));
    (void)shard.pull(0);
  }
  CATCH_CHECK(torch::allclose(shard.weights().detach(), ref.detach(), 1e-6, 1e-6));
  auto late = shard.push(1, 4, torch::randn({6}));  // computed on version 0: three updates ago
  CATCH_CHECK(late.stale_updates == 3);
  CATCH_CHECK_THROWS_WITH(shard.push(2, 4, torch::randn({6})), Catch::Contains("not one of its 2 workers"));
  CATCH_CHECK_THROWS_WITH(shard.push(0, 4, torch::randn({5})), Catch::Contains("a gradient of 5 elements"));
}

CATCH_TEST_CASE("under ssp:K a worker waits when K steps ahead of the slowest, never more", "[ps][shard]") {
  ParameterShard shard(torch::zeros({4}), config("ssp:2", 2, "sgd"));
  (void)shard.pull(0);
  (void)shard.pull(1);
  int64_t most = 0;
  for (int i = 0; i < 2; ++i) {
    most = std::max(most, shard.push(0, 1, torch::ones({4})).ahead);
    CATCH_REQUIRE(shard.may_pull(0));
    (void)shard.pull(0);
  }
  most = std::max(most, shard.push(0, 1, torch::ones({4})).ahead);
  CATCH_CHECK_FALSE(shard.may_pull(0));  // 3 steps done, the slowest none: more than 2 ahead
  (void)shard.push(1, 1, torch::ones({4}));
  CATCH_CHECK(shard.may_pull(0));
  CATCH_CHECK(most == 2);
  CATCH_CHECK(shard.pull(0).numel() == 4);
  CATCH_CHECK(shard.push(0, 1, torch::ones({4})).ahead == 2);
}

CATCH_TEST_CASE("a shard refuses a bad optimizer, worker count or initial value", "[ps][shard]") {
  CATCH_CHECK_THROWS_WITH(ParameterShard(torch::zeros({3}), config("sync", 1, "adam-ish")), Catch::Contains("unknown optimizer"));
  CATCH_CHECK_THROWS_WITH(ParameterShard(torch::zeros({3}), config("sync", 0)), Catch::Contains("at least one worker"));
  CATCH_CHECK_THROWS_WITH(ParameterShard(torch::zeros({2, 2}), config("sync", 1)), Catch::Contains("flat"));
  CATCH_CHECK_THROWS_WITH(ParameterShard(torch::zeros({3}), config("later", 1)), Catch::Contains("unknown parameter-server mode"));
}

CATCH_TEST_CASE("a shard saved and loaded continues as if never stopped; bad bytes are refused", "[ps][shard]") {
  torch::manual_seed(5);
  auto w0 = torch::randn({12});
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 8; ++i) grads.push_back(torch::randn({12}));
  ParameterShard a(w0, config("sync", 2));
  auto round = [&](ParameterShard& s, int i) {
    (void)s.push(0, 2, grads[2 * i]);
    (void)s.push(1, 3, grads[2 * i + 1]);
  };
  round(a, 0);
  round(a, 1);
  auto saved = a.save();
  ParameterShard b(torch::zeros({12}), config("sync", 2));
  b.load(saved);
  CATCH_CHECK(b.version() == 2);
  CATCH_CHECK(b.may_pull(0));
  CATCH_CHECK_FALSE(b.may_pull(1) == false);
  round(a, 2);
  round(b, 2);
  round(a, 3);
  round(b, 3);
  CATCH_CHECK(torch::equal(a.weights().detach(), b.weights().detach()));  // the AdamW moments came along
  ParameterShard small(torch::zeros({5}), config("sync", 2));
  CATCH_CHECK_THROWS_WITH(small.load(saved), Catch::Contains("holds 12 weights, this shard 5"));
  CATCH_CHECK_THROWS_WITH(b.load(saved.substr(0, saved.size() / 2)), Catch::Contains("does not read"));
}

// After a restore a sync shard learns the workers' step from their pushes: a step pushed again that
// another worker has already moved past is dropped (its pusher may pull at once), and the later
// step is gathered from every worker; a push for a step already applied adds nothing.
CATCH_TEST_CASE("a restored sync shard gathers by step number: pushes made again fall into place", "[ps][shard]") {
  torch::manual_seed(9);
  ParameterShard src(torch::randn({6}), config("sync", 2, "sgd"));
  auto saved = src.save();
  auto g = [](double v) { return torch::full({6}, v); };
  ParameterShard s(torch::zeros({6}), config("sync", 2, "sgd"));
  s.load(saved);
  CATCH_CHECK(s.may_pull(0));
  CATCH_CHECK(s.may_pull(1));
  (void)s.push(0, 1, g(1), 5);  // worker 0's step 5 again: its pull was cut off by the restart
  CATCH_CHECK_FALSE(s.may_pull(0));
  (void)s.push(1, 1, g(2), 6);  // worker 1 completed step 5 before the restart
  CATCH_CHECK(s.may_pull(0));   // step 5 is gone with the lost process: worker 0 goes on
  CATCH_CHECK_FALSE(s.may_pull(1));
  CATCH_CHECK(s.version() == 0);
  auto ack = s.push(0, 1, g(4), 6);
  CATCH_CHECK(ack.version == 1);  // step 6 from both workers, applied once
  CATCH_CHECK(s.may_pull(0));
  CATCH_CHECK(s.may_pull(1));
  // Their mean (2 + 4) / 2 = 3 as SGD's step (lr 0.05, no momentum on the first step, decay 0.01).
  auto w0 = ParameterShard::from_saved(saved, config("sync", 2, "sgd"))->weights().detach();
  auto want = w0 - 0.05 * (torch::full({6}, 3.0) + 0.01 * w0);
  CATCH_CHECK(torch::allclose(s.weights().detach(), want, 1e-6, 1e-6));
  (void)s.push(1, 1, g(8), 5);  // a late step-5 push: that step is done
  CATCH_CHECK(s.version() == 1);
  CATCH_CHECK(s.may_pull(1));
  auto before = s.save();
  (void)s.push(0, 1, g(1), 7);
  (void)s.push(0, 1, g(100), 7);  // pushed again (by a replacement): the first counts
  (void)s.push(1, 1, g(3), 7);
  CATCH_CHECK(s.version() == 2);
  auto t = ParameterShard::from_saved(before, config("sync", 2, "sgd"));
  (void)t->push(0, 1, g(1), 7);
  (void)t->push(1, 1, g(3), 7);
  CATCH_CHECK(torch::equal(t->weights().detach(), s.weights().detach()));
}

// A worker that replaces a lost one asks each shard where its predecessor stood: sync, the step
// being gathered (or the next when its push is there); ssp and async, the step after its last push.
// A step the shard has from it already is not applied again.
CATCH_TEST_CASE("a replacement worker learns its step from the shard and its pushes again change nothing", "[ps][shard]") {
  auto g = [](double v) { return torch::full({4}, v); };
  ParameterShard sync(torch::zeros({4}), config("sync", 2, "sgd"));
  CATCH_CHECK(sync.join(1).next_step == 0);  // nothing pushed yet: it cannot tell
  (void)sync.push(0, 1, g(1), 3);
  (void)sync.push(1, 1, g(1), 3);
  (void)sync.push(0, 1, g(2), 4);  // worker 0 waits for worker 1's step 4
  CATCH_CHECK_FALSE(sync.may_pull(0));
  auto j = sync.join(1);
  CATCH_CHECK(j.next_step == 4);
  CATCH_CHECK(j.version == 1);
  CATCH_CHECK(sync.join(0).next_step == 5);  // its step 4 is here: it would go on with 5
  (void)sync.push(1, 1, g(4), 4);
  CATCH_CHECK(sync.version() == 2);
  auto after = sync.weights().detach().clone();
  (void)sync.push(0, 1, g(50), 4);  // worker 0's replacement redoes step 4: this shard has it
  CATCH_CHECK(sync.version() == 2);
  CATCH_CHECK(torch::equal(sync.weights().detach(), after));
  CATCH_CHECK(sync.may_pull(0));

  for (const char* mode : {"ssp:2", "async"}) {
    CATCH_INFO(mode);
    ParameterShard s(torch::zeros({4}), config(mode, 2, "sgd"));
    CATCH_CHECK(s.join(0).next_step == 0);
    (void)s.push(0, 1, g(1), 11);
    (void)s.push(0, 1, g(1), 12);
    (void)s.push(1, 1, g(1), 11);
    CATCH_CHECK(s.join(0).next_step == 13);
    CATCH_CHECK(s.join(1).next_step == 12);
    auto v = s.version();
    auto ack = s.push(0, 1, g(9), 12);  // the lost worker's step 12, again
    CATCH_CHECK(s.version() == v);
    CATCH_CHECK(ack.steps == 2);
    (void)s.push(0, 1, g(1), 13);
    CATCH_CHECK(s.version() == v + 1);
  }
}
