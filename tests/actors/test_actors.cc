// The data loader and its sampler, the learning-rate schedule and the checkpoint store.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "support.h"
#include "yard/actors/batch_queue.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/crc32.h"
#include "yard/actors/data_loader.h"
#include "yard/actors/elastic.h"
#include "yard/actors/sampler.h"
#include "yard/actors/schedule.h"
#include "yard/actors/shares.h"

using namespace yard::actors;
namespace fs = std::filesystem;

TEST_CASE("every sample exactly once per epoch across ranks, for world sizes 1-4", "[actors][sampler]") {
  for (uint64_t n : {1u, 10u, 97u, 1000u})
    for (int world = 1; world <= 4; ++world)
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        INFO("n " << n << " world " << world << " epoch " << epoch);
        std::vector<int> seen(n, 0);
        std::set<uint64_t> steps;
        size_t lo = SIZE_MAX, hi = 0;
        for (int r = 0; r < world; ++r) {
          DistributedSampler s(n, world, r, 42);
          auto idx = s.indices(epoch);
          lo = std::min(lo, idx.size());
          hi = std::max(hi, idx.size());
          for (auto i : idx) seen[i]++;
          steps.insert(s.steps_per_epoch(8));
          // Batches walk the same indices in order.
          std::vector<uint64_t> walked;
          for (uint64_t st = 0; st < s.steps_per_epoch(8); ++st) {
            auto b = s.batch(epoch, st, 8);
            CHECK(b.size() <= 8);
            walked.insert(walked.end(), b.begin(), b.end());
          }
          CHECK(walked == idx);
        }
        for (auto c : seen) REQUIRE(c == 1);
        CHECK(hi - lo <= 1);
        CHECK(steps.size() == 1);  // the same number of steps on every rank
      }
}

TEST_CASE("shuffles are seeded per epoch and the same everywhere", "[actors][sampler]") {
  DistributedSampler a(500, 2, 1, 7), b(500, 2, 1, 7), c(500, 2, 1, 8);
  CHECK(a.indices(3) == b.indices(3));
  CHECK(a.indices(3) != a.indices(4));
  CHECK(a.indices(3) != c.indices(3));
  DistributedSampler plain(10, 1, 0, 7, false);
  CHECK(plain.indices(0) == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2, 1), std::invalid_argument);
}

TEST_CASE("class-balanced epochs give every class the same share", "[actors][sampler]") {
  std::vector<int> labels(1000, 0);
  for (int i = 0; i < 30; ++i) labels[i * 7] = 1;
  for (int i = 0; i < 5; ++i) labels[i * 11 + 3] = 2;
  std::map<int, int> count;
  std::set<uint64_t> rare_seen;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(1000, 3, r, 1);
    s.set_class_balanced(labels);
    for (auto i : s.indices(0)) {
      count[labels[i]]++;
      if (labels[i] == 2) rare_seen.insert(i);
    }
  }
  CHECK(count[0] == count[1]);
  CHECK(count[1] == count[2]);
  CHECK(rare_seen.size() == 5);  // every member of the rarest class appears
}

TEST_CASE("a balance power of 0.5 gives classes shares growing as the square root of their size", "[actors][sampler]") {
  std::vector<int> labels(900, 0);
  for (int i = 0; i < 100; ++i) labels[i * 9] = 1;  // 800 of class 0, 100 of class 1
  DistributedSampler s(900, 1, 0, 1);
  s.set_class_balanced(labels, 0.5);
  std::map<int, int> count;
  std::set<uint64_t> seen;
  for (auto i : s.indices(0)) count[labels[i]]++, seen.insert(i);
  CHECK(count[0] == 800);                     // the largest class: each once
  CHECK(count[1] == 283);                     // 800 * sqrt(100 / 800)
  CHECK(seen.size() == 900);                  // nobody left out
  CHECK(s.epoch_size() == 1083);
  CHECK_THROWS_AS(s.set_class_balanced(labels, 0.0), std::invalid_argument);
}

namespace {
std::string tmpdir(const std::string& tag) {
  auto d = fs::temp_directory_path() / ("yard-ckpt-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  return d.string();
}
Checkpoint make(uint64_t step) {
  Checkpoint c;
  c.step = step;
  c.blobs["model"] = std::string(1000 + step, static_cast<char>(step));
  c.blobs["loader"] = "epoch=1 step=" + std::to_string(step);
  return c;
}
}  // namespace

TEST_CASE("checkpoints round-trip, keep the last K, and move the latest pointer", "[actors][checkpoint]") {
  auto dir = tmpdir("rt");
  std::vector<uint64_t> latest;
  CheckpointStore st(dir, 2, [&](uint64_t s, const std::string&) { latest.push_back(s); });
  for (uint64_t s : {10, 20, 30}) st.write(make(s));
  CHECK(st.list().size() == 2);
  CHECK(latest == std::vector<uint64_t>{10, 20, 30});
  std::ifstream lf(dir + "/LATEST");
  std::string l;
  std::getline(lf, l);
  CHECK(l == "ckpt-000000000030.bin");
  auto r = st.restore();
  REQUIRE(r);
  CHECK(r->step == 30);
  CHECK(r->blobs == make(30).blobs);
  fs::remove_all(dir);
}

TEST_CASE("a corrupt, truncated or half-written newest checkpoint is skipped with a warning", "[actors][checkpoint]") {
  auto dir = tmpdir("bad");
  CheckpointStore st(dir, 5);
  for (uint64_t s : {1, 2, 3, 4}) st.write(make(s));
  auto files = st.list();  // newest first
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('X');
  }
  fs::resize_file(files[1], fs::file_size(files[1]) / 2);
  std::ofstream(dir + "/ckpt-000000000009.bin.tmp") << "half";
  auto r = st.restore();
  REQUIRE(r);
  CHECK(r->step == 2);
  REQUIRE(st.skipped().size() == 2);
  CHECK_THAT(st.skipped()[0], Catch::Contains(files[0]) && Catch::Contains("checksum"));
  CHECK_THAT(st.skipped()[1], Catch::Contains(files[1]));
  CHECK_THROWS_WITH(CheckpointStore::read_file(dir + "/LATEST"), Catch::Contains("not a checkpoint"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint whose entry declares more bytes than the file holds is refused before allocating them",
          "[actors][checkpoint]") {
  auto dir = tmpdir("huge");
  fs::create_directories(dir);
  // Magic, version 1, step 7, one entry whose name claims 3.2 GB; a right checksum.
  std::string b = "YRDCKPT1";
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  uint32_t version = 1, entries = 1, name_len = 3200000000u;
  uint64_t step = 7;
  put(&version, 4);
  put(&step, 8);
  put(&entries, 4);
  put(&name_len, 4);
  b += "model";
  uint32_t crc = crc32(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  put(&crc, 4);
  std::string path = dir + "/ckpt-000000000007.bin";
  std::ofstream(path, std::ios::binary) << b;
  CHECK_THROWS_WITH(CheckpointStore::read_file(path), Catch::Contains("declares 3200000000 bytes, past the end"));
  fs::remove_all(dir);
}

TEST_CASE("asynchronous writes hand over a snapshot and land in order", "[actors][checkpoint]") {
  auto dir = tmpdir("async");
  CheckpointStore st(dir, 3);
  auto c = make(5);
  st.write_async(c);
  c.blobs["model"] = "changed after hand-over";  // the snapshot was taken: this does not leak in
  st.write_async(make(6));
  st.wait();
  auto r = st.restore();
  REQUIRE(r);
  CHECK(r->step == 6);
  auto five = CheckpointStore::read_file(st.list()[1]);
  CHECK(five.blobs.at("model") == make(5).blobs.at("model"));
  fs::remove_all(dir);
}

TEST_CASE("a deferred write makes its checkpoint on the store's thread; its failure fails that write",
          "[actors][checkpoint]") {
  auto dir = tmpdir("deferred");
  CheckpointStore st(dir, 3);
  auto caller = std::this_thread::get_id();
  std::thread::id maker;
  st.write_async(std::function<Checkpoint()>([&] {
    maker = std::this_thread::get_id();
    return make(8);
  }));
  st.wait();
  CHECK(maker != caller);
  CHECK(st.restore()->step == 8);
  st.write_async(std::function<Checkpoint()>([]() -> Checkpoint { throw std::runtime_error("snapshot went bad"); }));
  CHECK_THROWS_WITH(st.wait(), Catch::Contains("snapshot went bad"));
  st.write_async(make(9));  // the store carries on
  st.wait();
  CHECK(st.restore()->step == 9);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint writers run as background threads; the caller keeps its priority", "[actors][checkpoint]") {
  int policy = -1, nice = -100;
  std::thread t([&] {
    make_background_thread();
    policy = sched_getscheduler(0);
    errno = 0;
    nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  });
  t.join();
  CHECK(policy == SCHED_BATCH);
  CHECK(nice == 10);
  CHECK(sched_getscheduler(0) == SCHED_OTHER);
}

TEST_CASE("the latest pointer is handed on after each complete write", "[actors][checkpoint]") {
  auto dir = tmpdir("latest");
  std::vector<std::pair<uint64_t, std::string>> told;
  CheckpointStore st(dir, 2, [&](uint64_t step, const std::string& path) {
    CHECK(fs::exists(path));  // written and renamed before anyone is told
    told.emplace_back(step, path);
  });
  st.write(make(77));
  st.write(make(78));
  REQUIRE(told.size() == 2);
  CHECK(told[0].first == 77);
  CHECK_THAT(told[0].second, Catch::Contains("ckpt-000000000077.bin"));
  CHECK(told[1].first == 78);
  fs::remove_all(dir);
}

TEST_CASE("the learning rate scales with the global batch, warms up, then holds or decays along a cosine",
          "[actors][schedule]") {
  LrSchedule s;
  s.base_lr = 0.1;
  s.base_batch = 32;
  s.global_batch = 128;  // four workers of 32: four times the rate, never divided by the workers
  s.warmup_steps = 10;
  CHECK(s.peak() == Approx(0.4));
  CHECK(s.at(0) == Approx(0.1));
  CHECK(s.at(5) == Approx(0.25));
  CHECK(s.at(10) == Approx(0.4));
  CHECK(s.at(100000) == Approx(0.4));
  s.decay = LrSchedule::parse("cosine");
  s.total_steps = 110;
  s.final_fraction = 0.1;
  CHECK(s.at(10) == Approx(0.4));
  CHECK(s.at(60) == Approx(0.04 + 0.36 * 0.5));  // half way: the middle of the half cosine
  CHECK(s.at(110) == Approx(0.04));
  CHECK(s.at(500) == Approx(0.04));
  for (int64_t k = 11; k <= 110; ++k) CHECK(s.at(k) < s.at(k - 1));
  CHECK_THROWS_WITH(LrSchedule::parse("linear"), Catch::Contains("unknown learning-rate decay 'linear'"));
}

TEST_CASE("elastic batches: every sample exactly once per epoch whatever the resizes; fixed worlds match batch()",
          "[actors][sampler][elastic]") {
  for (uint64_t n : {1u, 97u, 1000u}) {
    DistributedSampler s(n, 1, 0, 7);
    // A world that changes between steps: 2, 3, 2, 1, 4, ... as an elastic group might.
    const int worlds[] = {2, 3, 2, 1, 4, 3};
    const uint64_t batch = 8;
    ElasticPosition pos;
    std::map<uint64_t, std::vector<int>> seen;  // epoch -> count per sample
    for (int step = 0; pos.epoch < 3; ++step) {
      int world = worlds[step % 6];
      for (int r = 0; r < world; ++r)
        for (auto i : s.elastic_batch(pos.epoch, pos.offset, world, r, batch)) {
          auto& v = seen[pos.epoch];
          v.resize(n);
          v[i]++;
        }
      pos.advance(world, batch, s.epoch_size());
    }
    for (auto& [epoch, counts] : seen)
      for (uint64_t i = 0; i < n; ++i) {
        INFO("n " << n << " epoch " << epoch << " sample " << i);
        REQUIRE(counts[i] == 1);
      }
  }
  // A fixed world takes exactly what batch() gives rank by rank.
  for (int world = 1; world <= 3; ++world)
    for (int r = 0; r < world; ++r) {
      DistributedSampler fixed(97, world, r, 7), any(97, 1, 0, 7);
      for (uint64_t step = 0; step < fixed.steps_per_epoch(8); ++step)
        CHECK(any.elastic_batch(1, step * 8 * world, world, r, 8) == fixed.batch(1, step, 8));
    }
  DistributedSampler s(10, 1, 0, 7);
  CHECK_THROWS_AS(s.elastic_batch(0, 0, 2, 2, 8), std::invalid_argument);
}

TEST_CASE("batch shares: split in proportion, floors, largest remainders, bad weights", "[actors][shares]") {
  CHECK(split_by_weight(64, {1, 1}) == std::vector<uint64_t>{32, 32});
  CHECK(split_by_weight(64, {2, 1, 1}) == std::vector<uint64_t>{32, 16, 16});
  CHECK(split_by_weight(10, {1, 1, 1}) == std::vector<uint64_t>{4, 3, 3});  // the remainder to the lower rank
  CHECK(split_by_weight(64, {3, 1}) == std::vector<uint64_t>{48, 16});
  // Every rank keeps at least the floor, so that it goes on measuring its speed.
  CHECK(split_by_weight(10, {1000, 1}) == std::vector<uint64_t>{9, 1});
  CHECK(split_by_weight(10, {1000, 1}, 3) == std::vector<uint64_t>{7, 3});
  CHECK(split_by_weight(2, {1, 1, 1}) == std::vector<uint64_t>{1, 1, 0});  // fewer samples than ranks: no floor
  CHECK(split_by_weight(0, {1, 2}) == std::vector<uint64_t>{0, 0});
  // Weights that are not positive finite numbers count as the mean of the others.
  CHECK(split_by_weight(60, {1, std::nan(""), 2}) == std::vector<uint64_t>{14, 20, 26});
  CHECK(split_by_weight(60, {0, -1, INFINITY}) == std::vector<uint64_t>{20, 20, 20});
  for (uint64_t total : {1u, 7u, 63u, 64u, 1000u}) {
    auto s = split_by_weight(total, {0.3, 1.7, 5.0, 0.01});
    CHECK(std::accumulate(s.begin(), s.end(), uint64_t{0}) == total);
  }
  CHECK_THROWS_AS(split_by_weight(8, {}), std::invalid_argument);
}

TEST_CASE("batch shares: a slow rank gets less within a few steps, and the shares follow a swap", "[actors][shares]") {
  // Rank 1 at half rank 0's speed. The rates each step measures follow the shares: time = share / speed.
  ShareBalancer b(64, 2);
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});
  b.observe({0, 0});  // the first step of a group: nothing measured yet
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});
  CHECK_FALSE(b.uneven());
  b.observe({200, 0});  // one rank measured: not yet
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});
  std::vector<double> speed = {200, 100};
  auto step_time = [&](const std::vector<uint64_t>& s) {
    return std::max(double(s[0]) / speed[0], double(s[1]) / speed[1]);
  };
  double equal = step_time(b.shares()), ideal = 64.0 / (speed[0] + speed[1]);
  for (int k = 0; k < 5; ++k) b.observe(speed);  // a rank's rate is its speed whatever its share
  CHECK(b.uneven());
  CHECK(b.shares()[0] + b.shares()[1] == 64);
  CHECK(b.shares()[0] >= 41);  // 42.67 at the ideal
  CHECK(step_time(b.shares()) <= ideal * 1.05);
  CHECK(step_time(b.shares()) < equal);
  // The speeds swap: within 10 steps the shares are the other way round.
  speed = {100, 200};
  for (int k = 0; k < 10; ++k) b.observe(speed);
  CHECK(b.shares()[1] >= 41);
  CHECK(step_time(b.shares()) <= ideal * 1.05);
  // Rates of another world (a measurement from an older generation) are ignored.
  auto before = b.shares();
  b.observe({1, 1, 1});
  CHECK(b.shares() == before);
  CHECK_THROWS_AS(ShareBalancer(64, 0), std::invalid_argument);
  CHECK_THROWS_AS(ShareBalancer(64, 2, 0), std::invalid_argument);
}

TEST_CASE("batch shares: one slow step moves no share; a node that stays slow does", "[actors][shares]") {
  ShareBalancer b(64, 2);
  for (int k = 0; k < 5; ++k) b.observe({100, 100});
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});
  b.observe({100, 20});  // rank 1 descheduled for one step
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});
  for (int k = 0; k < 5; ++k) b.observe({100, 100});
  b.observe({100, 50});  // rank 1's node now at half speed
  b.observe({100, 50});
  CHECK(b.shares() == std::vector<uint64_t>{32, 32});  // two steps of five: not yet
  b.observe({100, 50});
  CHECK(b.shares() == std::vector<uint64_t>{42, 22});  // 1 each, then 62 split 2:1 by largest remainders
}

TEST_CASE("batch shares: uneven shares still take every sample exactly once per epoch", "[actors][sampler][shares]") {
  for (uint64_t n : {1u, 97u, 1000u}) {
    DistributedSampler s(n, 1, 0, 7);
    const std::vector<std::vector<uint64_t>> shares = {{16, 8}, {12, 12}, {2, 7, 15}, {24}, {3, 5, 7, 9}};
    ElasticPosition pos;
    std::map<uint64_t, std::vector<int>> seen;
    for (int step = 0; pos.epoch < 3; ++step) {
      const auto& sh = shares[static_cast<size_t>(step) % shares.size()];
      uint64_t batch = 24 / sh.size();  // 24 positions a step, whatever the split
      for (int r = 0; r < static_cast<int>(sh.size()); ++r) {
        auto got = s.shared_batch(pos.epoch, pos.offset, sh, r);
        CHECK(got.size() <= sh[static_cast<size_t>(r)]);
        for (auto i : got) {
          auto& v = seen[pos.epoch];
          v.resize(n);
          v[i]++;
        }
      }
      pos.advance(static_cast<int>(sh.size()), batch, s.epoch_size());
    }
    for (auto& [epoch, counts] : seen)
      for (uint64_t i = 0; i < n; ++i) {
        INFO("n " << n << " epoch " << epoch << " sample " << i);
        REQUIRE(counts[i] == 1);
      }
  }
  // Equal shares are elastic_batch's striding; uneven ones take blocks one after another.
  DistributedSampler s(100, 1, 0, 7);
  CHECK(s.shared_batch(0, 16, {8, 8}, 1) == s.elastic_batch(0, 16, 2, 1, 8));
  auto a = s.shared_batch(0, 0, {12, 4}, 0), b = s.shared_batch(0, 0, {12, 4}, 1);
  CHECK(a.size() == 12);
  CHECK(b.size() == 4);
  auto whole = s.elastic_batch(0, 0, 1, 0, 16);
  a.insert(a.end(), b.begin(), b.end());
  CHECK(a == whole);
  // At the epoch's end the positions left are split in proportion: 4 left of 16, shares 12:4.
  CHECK(s.shared_batch(0, 96, {12, 4}, 0).size() == 3);
  CHECK(s.shared_batch(0, 96, {12, 4}, 1).size() == 1);
  CHECK_THROWS_AS(s.shared_batch(0, 0, {8, 8}, 2), std::invalid_argument);
}

TEST_CASE("elastic learning rate: each resize moves to the new global batch's rate over a short warm-up",
          "[actors][schedule][elastic]") {
  ElasticLr lr;
  lr.base.base_lr = 0.1;
  lr.base.base_batch = 32;
  lr.base.global_batch = 64;  // two workers of 32
  lr.resize_warmup = 4;
  CHECK(lr.at(10) == Approx(0.2));
  lr.resize(20, 96);  // a third worker joins at step 20
  CHECK(lr.at(19) == Approx(0.2));
  CHECK(lr.at(20) == Approx(0.2 + 0.1 * 1 / 5.0));  // a fifth of the way
  CHECK(lr.at(23) == Approx(0.2 + 0.1 * 4 / 5.0));
  CHECK(lr.at(24) == Approx(0.3));                   // 3x the base: linear scaling, not divided
  for (int64_t k = 20; k <= 24; ++k) CHECK(lr.at(k) > lr.at(k - 1));
  lr.resize(40, 64);  // drained back to two
  CHECK(lr.at(39) == Approx(0.3));
  CHECK(lr.at(44) == Approx(0.2));
  for (int64_t k = 40; k <= 44; ++k) CHECK(lr.at(k) < lr.at(k - 1));
  lr.resize(40, 32);  // the same step again: replaced, not stacked
  CHECK(lr.changes.size() == 2);
  CHECK(lr.at(50) == Approx(0.1));
  CHECK_THROWS_AS(lr.resize(30, 64), std::invalid_argument);
}

TEST_CASE("elastic membership: survivors keep their order, candidates join up to MAX, drains release, below MIN waits",
          "[actors][elastic]") {
  using S = ElasticSlot::State;
  auto slot = [](S s, int rank = -1, bool draining = false) { return ElasticSlot{s, rank, draining}; };
  // Nothing yet: ask for MAX candidates.
  auto p = plan_elastic({}, 2, 3);
  CHECK_FALSE(p.regroup);
  CHECK(p.submit == 3);
  // Two ready, one still waiting for room: the group forms with MIN.
  p = plan_elastic({slot(S::kReady), slot(S::kStarting), slot(S::kReady)}, 2, 3);
  CHECK(p.regroup);
  CHECK(p.ranks == std::vector<size_t>{0, 2});
  CHECK(p.submit == 0);
  CHECK(p.why == "2 joined");
  // Only one ready: not enough to start.
  p = plan_elastic({slot(S::kReady), slot(S::kStarting), slot(S::kPreparing)}, 2, 3);
  CHECK_FALSE(p.regroup);
  CHECK(p.wait);
  // Members in the order of their old ranks, the newcomer behind them; never past MAX.
  p = plan_elastic({slot(S::kMember, 1), slot(S::kReady), slot(S::kMember, 0), slot(S::kReady)}, 1, 3);
  CHECK(p.regroup);
  CHECK(p.ranks == std::vector<size_t>{2, 0, 1});
  // Nothing changed: nothing to do.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1), slot(S::kStarting)}, 2, 3);
  CHECK_FALSE(p.regroup);
  CHECK_FALSE(p.wait);
  CHECK(p.submit == 0);
  // A member on a draining node is released, and a candidate asked for in its place.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1), slot(S::kMember, 2, true)}, 2, 3);
  CHECK(p.regroup);
  CHECK(p.release == std::vector<size_t>{2});
  CHECK(p.ranks == std::vector<size_t>{0, 1});
  CHECK(p.submit == 1);
  CHECK(p.why == "1 released from a draining node");
  // A lost member leaves one survivor, below MIN: wait (the survivor keeps its state).
  p = plan_elastic({slot(S::kMember, 0), slot(S::kLost, 1), slot(S::kStarting)}, 2, 3);
  CHECK(p.wait);
  CHECK_FALSE(p.regroup);
  CHECK(p.submit == 1);
  // ...until its replacement is ready.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kLost, 1), slot(S::kReady), slot(S::kStarting)}, 2, 3);
  CHECK(p.regroup);
  CHECK(p.ranks == std::vector<size_t>{0, 2});
  CHECK(p.why == "1 lost, 1 joined");
  // A candidate lost before it joined changes nothing.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1), slot(S::kLost)}, 2, 3);
  CHECK_FALSE(p.regroup);
  CHECK(p.submit == 1);
  CHECK_THROWS_AS(plan_elastic({}, 0, 2), std::invalid_argument);
  CHECK_THROWS_AS(plan_elastic({}, 3, 2), std::invalid_argument);
}

TEST_CASE("elastic membership under a shrinking allotment: candidates go first, then the named members, then the highest ranks; never below MIN",
          "[actors][elastic]") {
  using S = ElasticSlot::State;
  auto slot = [](S s, int rank = -1, bool asked = false) { return ElasticSlot{s, rank, false, asked}; };
  // Allotted 2 of 3 members and a candidate: the candidate goes, then rank 2; no one is asked for.
  auto p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1), slot(S::kMember, 2), slot(S::kStarting)}, 1, 2);
  CHECK(p.regroup);
  CHECK(p.release == std::vector<size_t>{3, 2});
  CHECK(p.ranks == std::vector<size_t>{0, 1});
  CHECK(p.submit == 0);
  CHECK(p.why == "1 released to the job queue");
  // The member on the node the head named goes before the highest rank (rank 0 too, if named).
  p = plan_elastic({slot(S::kMember, 0, true), slot(S::kMember, 1), slot(S::kMember, 2)}, 1, 2);
  CHECK(p.release == std::vector<size_t>{0});
  CHECK(p.ranks == std::vector<size_t>{1, 2});
  // Three members, MIN 2 and allotted 2: one goes, MIN stay.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1), slot(S::kMember, 2)}, 2, 2);
  CHECK(p.release == std::vector<size_t>{2});
  CHECK(p.ranks.size() == 2);
  // Within the allotment: nothing changes.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kMember, 1)}, 1, 2);
  CHECK_FALSE(p.regroup);
  CHECK(p.release.empty());
  // A ready candidate above the allotment does not join; it is let go.
  p = plan_elastic({slot(S::kMember, 0), slot(S::kReady)}, 1, 1);
  CHECK_FALSE(p.regroup);
  CHECK(p.release == std::vector<size_t>{1});
}

TEST_CASE("the data loader hands over the sampler's batches in order, epoch after epoch, fetched ahead",
          "[actors][loader]") {
  const uint64_t n = 103, batch = 8;
  for (int world = 1; world <= 3; ++world) {
    std::set<uint64_t> seen_epoch1;
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler ref(n, world, rank, 5);
      std::atomic<int> fetched{0};
      DataLoader<std::vector<uint64_t>> dl(
          DistributedSampler(n, world, rank, 5), batch,
          [&](const std::vector<uint64_t>& idx) {
            ++fetched;
            return idx;  // the "batch" is its indices
          },
          3);
      CHECK(dl.steps_per_epoch() == ref.steps_per_epoch(batch));
      for (uint64_t e = 0; e < 2; ++e)
        for (uint64_t s = 0; s < dl.steps_per_epoch(); ++s) {
          CHECK(dl.position().epoch == e);
          CHECK(dl.position().step == s);
          auto it = dl.next();
          CHECK(it.epoch == e);
          CHECK(it.step == s);
          CHECK(it.batch == ref.batch(e, s, batch));
          if (e == 1) seen_epoch1.insert(it.indices.begin(), it.indices.end());
        }
      CHECK(dl.position().epoch == 2);
      // The loader works ahead, but no further than its depth.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (fetched.load() < static_cast<int>(2 * dl.steps_per_epoch() + 3) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      CHECK(fetched.load() == static_cast<int>(2 * dl.steps_per_epoch() + 3));
    }
    CHECK(seen_epoch1.size() == n);  // every sample once over the ranks
  }
}

TEST_CASE("the data loader's position goes into a checkpoint and back", "[actors][loader]") {
  auto make = [] {
    return std::make_unique<DataLoader<std::vector<uint64_t>>>(DistributedSampler(50, 2, 1, 9), 4,
                                                                [](const std::vector<uint64_t>& idx) { return idx; });
  };
  auto a = make();
  for (int i = 0; i < 9; ++i) a->next();  // into the second epoch (7 steps per epoch)
  auto saved = DataLoader<std::vector<uint64_t>>::encode(a->position());
  CHECK(saved == "1 2");
  std::vector<std::vector<uint64_t>> rest;
  for (int i = 0; i < 10; ++i) rest.push_back(a->next().batch);
  auto b = make();
  b->next();  // anywhere; seek drops what was fetched ahead
  b->seek(DataLoader<std::vector<uint64_t>>::decode(saved));
  for (int i = 0; i < 10; ++i) CHECK(b->next().batch == rest[static_cast<size_t>(i)]);
  CHECK_THROWS_WITH(DataLoader<int>::decode("x y"), Catch::Contains("bad position 'x y'"));
  CHECK_THROWS_WITH(b->seek({0, 99}), Catch::Contains("past the epoch's 7 steps"));
}

TEST_CASE("a batch that cannot be fetched fails next() with the fetch's error", "[actors][loader]") {
  DataLoader<int> dl(DistributedSampler(20, 1, 0, 1), 5, [](const std::vector<uint64_t>& idx) {
    if (idx[0] == 7 || idx[1] == 7 || idx[2] == 7 || idx[3] == 7 || idx[4] == 7) throw std::runtime_error("sample 7 is unreadable");
    return 1;
  });
  bool failed = false;
  for (int i = 0; i < 4 && !failed; ++i) {
    try {
      dl.next();
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("sample 7 is unreadable"));
      failed = true;
    }
  }
  CHECK(failed);
}

// Batches on request (BatchCursor): every position of an epoch handed out once, in chunks that
// end at the epoch's end; a claim completes the worker's previous one.
TEST_CASE("a batch cursor hands out each position of an epoch once, in chunks", "[batch-queue]") {
  yard::actors::BatchCursor c(10, 4);  // batches of 4, 4, 2
  CHECK_FALSE(c.claim(0).granted);  // no chunk open
  c.open(2);
  auto a = c.claim(0), b = c.claim(1);
  CHECK((a.granted && a.epoch == 0 && a.offset == 0 && a.size == 4 && a.seq == 0));
  CHECK((b.granted && b.offset == 4 && b.seq == 1 && b.next_offset == 8));
  CHECK(c.outstanding() == 2);
  auto none = c.claim(0);  // the chunk is used up; worker 0's batch is complete
  CHECK_FALSE(none.granted);
  CHECK(c.outstanding() == 1);
  c.complete(1);
  CHECK(c.outstanding() == 0);
  c.open(5);  // more than the epoch has left: the chunk ends with the epoch
  auto last = c.claim(1);
  CHECK((last.granted && last.offset == 8 && last.size == 2 && last.next_epoch == 1 && last.next_offset == 0));
  auto after = c.claim(0);
  CHECK_FALSE(after.granted);
  CHECK(after.next_epoch == 1);
  c.open(1);
  auto next = c.claim(0);
  CHECK((next.epoch == 1 && next.offset == 0 && next.seq == 3));
  CHECK(c.state() == "1 4");
  yard::actors::BatchCursor d(10, 4);
  d.seek(c.state());
  d.open(1);
  CHECK(d.claim(3).offset == 4);
  CHECK_THROWS_WITH(d.seek("1 10"), Catch::Contains("past an epoch of 10 samples"));
  // A lost worker's claim is handed out again, first, even when the chunk has no room left.
  auto lost = d.claim(3);  // the chunk of 1 is used up: nothing
  CHECK_FALSE(lost.granted);
  d.open(1);
  auto held = d.claim(5);
  d.release(5);
  CHECK(d.outstanding() == 0);
  auto again = d.claim(6);
  CHECK((again.granted && again.again && again.epoch == held.epoch && again.offset == held.offset && again.seq == held.seq));
  CHECK_FALSE(d.claim(7).granted);
  CHECK_THROWS_WITH(d.seek("one"), Catch::Contains("is not \"epoch offset\""));
  CHECK_THROWS_WITH(yard::actors::BatchCursor(0, 4), Catch::Contains("an epoch of 0"));
}
