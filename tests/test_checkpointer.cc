// The Checkpointer actor on a real embedded cluster: snapshots handed over by calls are written
// atomically, the latest pointer moves in the control store, restore skips a corrupt newest file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "yard/process.h"
#include "yard/redis.h"
#include "yard/actors/checkpointer.h"
#include "yard/yard.h"

using namespace yard::actors;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

void yard_test_worker_hook(int argc, char** argv) {
  yard::InitOptions o;
  o.num_cpus = 2;
  yard::init(o, argc, argv);
}

namespace {
CheckpointData make(uint64_t step) {
  CheckpointData c;
  c.step = step;
  c.blobs["model"] = std::string(1000 + step, static_cast<char>('a' + step % 26));
  c.blobs["loader"] = std::to_string(step / 10) + " " + std::to_string(step % 10);
  return c;
}
}  // namespace

TEST_CASE("the checkpointer actor writes, points to and restores checkpoints", "[actors][checkpointer]") {
  auto dir = fs::temp_directory_path() / ("yard-ckpt-actor-" + std::to_string(getpid()));
  fs::remove_all(dir);
  auto ck = yard::actor<Checkpointer>(dir.string(), int64_t(2), std::string("job-a")).remote();
  CHECK(*ck.call(&Checkpointer::latest_step).remote().get(60s) == -1);
  CHECK_FALSE(ck.call(&Checkpointer::restore).remote().get(60s)->has_value());
  // Handed over without waiting; written in order.
  std::vector<yard::ObjectRef<std::string>> paths;
  for (uint64_t s : {10u, 20u, 30u}) paths.push_back(ck.call(&Checkpointer::save).remote(make(s)));
  for (auto& p : paths) CHECK(fs::path(*p.get(60s)).parent_path() == dir);
  CHECK_FALSE(fs::exists(*paths[0].get(60s)));  // only the newest two are kept
  CHECK(fs::exists(*paths[2].get(60s)));
  // The control store's pointer.
  CHECK(*ck.call(&Checkpointer::latest_step).remote().get(60s) == 30);
  auto cs = yard::control_store();
  auto [host, port] = yard::detail::split_address(cs.address);
  yard::detail::Redis r(host, port, cs.password, 5s);
  CHECK(r.cmd({"HGET", "yard:ckpt:job-a:latest", "path"}).str() == *paths[2].get(60s));
  auto got = *ck.call(&Checkpointer::restore).remote().get(60s);
  REQUIRE(got.has_value());
  CHECK(got->step == 30);
  CHECK(got->blobs == make(30).blobs);
  // A corrupt newest checkpoint is passed over, and said so.
  {
    std::fstream f(*paths[2].get(60s), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('#');
  }
  got = *ck.call(&Checkpointer::restore).remote().get(60s);
  REQUIRE(got.has_value());
  CHECK(got->step == 20);
  auto skipped = *ck.call(&Checkpointer::skipped).remote().get(60s);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("ckpt-000000000030.bin"));
  yard::kill(ck);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint that cannot be written fails its save call with the path and the reason; earlier ones stay",
          "[actors][checkpointer]") {
  auto dir = fs::temp_directory_path() / ("yard-ckpt-gone-" + std::to_string(getpid()));
  fs::remove_all(dir);
  auto ck = yard::actor<Checkpointer>(dir.string(), int64_t(3), std::string("job-b")).remote();
  auto first = *ck.call(&Checkpointer::save).remote(make(1)).get(60s);
  // The directory turns into a file: the next write cannot happen.
  fs::rename(dir, dir.string() + ".moved");
  std::ofstream(dir) << "a file where the directory should be";
  try {
    ck.call(&Checkpointer::save).remote(make(2)).get(60s);
    FAIL("the save succeeded");
  } catch (const yard::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains(dir.string()));
  }
  // The actor is still there; with the directory back, the earlier checkpoint is restored and
  // the next write works.
  fs::remove(dir);
  fs::rename(dir.string() + ".moved", dir);
  auto got = *ck.call(&Checkpointer::restore).remote().get(60s);
  REQUIRE(got.has_value());
  CHECK(got->step == 1);
  CHECK(fs::exists(first));
  CHECK(fs::exists(*ck.call(&Checkpointer::save).remote(make(3)).get(60s)));
  CHECK(*ck.call(&Checkpointer::latest_step).remote().get(60s) == 3);
  yard::kill(ck);
  fs::remove_all(dir);
}

TEST_CASE("a checkpointer whose directory cannot be made fails at once, naming it", "[actors][checkpointer]") {
  auto blocker = fs::temp_directory_path() / ("yard-ckpt-blocker-" + std::to_string(getpid()));
  std::ofstream(blocker) << "a file where a directory should be";
  auto ck = yard::actor<Checkpointer>((blocker / "sub").string(), int64_t(2), std::string("job-c")).remote();
  CHECK_THROWS_WITH(ck.call(&Checkpointer::latest_step).remote().get(60s), Catch::Contains((blocker / "sub").string()));
  fs::remove(blocker);
}
