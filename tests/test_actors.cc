// The data-loader's sampler and the checkpoint store.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "redis_client.h"
#include "support.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/sampler.h"

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

TEST_CASE("the latest pointer can live in Redis", "[actors][checkpoint]") {
  auto& redis = yard::test::shared_redis();
  yard::detail::Redis r("127.0.0.1", redis.port(), "", std::chrono::seconds(2));
  auto dir = tmpdir("redis");
  CheckpointStore st(dir, 2, [&](uint64_t step, const std::string& path) {
    r.cmd({"HSET", "yard:ckpt:job-1:latest", "step", std::to_string(step), "path", path});
  });
  st.write(make(77));
  CHECK(r.cmd({"HGET", "yard:ckpt:job-1:latest", "step"}).str() == "77");
  CHECK_THAT(r.cmd({"HGET", "yard:ckpt:job-1:latest", "path"}).str(), Catch::Contains("ckpt-000000000077.bin"));
  fs::remove_all(dir);
}
