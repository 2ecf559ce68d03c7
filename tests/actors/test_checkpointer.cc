// The Checkpointer actor on a real embedded cluster: snapshots handed over by calls are written
// atomically, the latest pointer moves in the job's checkpoint records, restore skips a corrupt
// newest file. And the job's rendezvous store, shared by the job's driver and workers.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/process.h"
#include "yard/job_store.h"
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
// A task reads what the driver left in the job's rendezvous store, and leaves an answer.
std::string answer_through_rendezvous(std::string key) {
  auto s = yard::job_rendezvous("test");
  auto v = s->get(key);
  s->set(key + ":answer", v ? "saw " + *v : "saw nothing");
  return v.value_or("");
}
}  // namespace
YARD_REMOTE(answer_through_rendezvous);

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
  // The job's checkpoint record, read by the driver: the actor works for the same job.
  auto rec = yard::latest_checkpoint("job-a");
  REQUIRE(rec.has_value());
  CHECK(rec->step == 30);
  CHECK(rec->path == *paths[2].get(60s));
  CHECK_FALSE(yard::latest_checkpoint("job-b").has_value());
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

TEST_CASE("a job's rendezvous store is shared by its driver and workers, under the job's keys", "[job_store]") {
  auto s = yard::job_rendezvous("test");
  s->set("greeting", "hello");
  CHECK(*yard::task(answer_through_rendezvous).remote(std::string("greeting")).get(60s) == "hello");
  CHECK(s->get("greeting:answer") == "saw hello");
  CHECK_THAT(s->where(), Catch::Contains(yard::job_id()));
  // The records are the job's, in the space named: found under its keys, not under another
  // space's, and gone with erase_prefix.
  auto prefix = yard::keys::rendezvous_prefix(yard::job_id(), "test");
  auto raw = yard::detail::cluster_control();
  auto exists = [&](const std::string& key) {
    return raw->run([&](yard::detail::Redis& r) { return r.cmd({"EXISTS", key}).integer(); });
  };
  CHECK(exists(prefix + "greeting") == 1);
  CHECK_FALSE(yard::job_rendezvous("other")->get("greeting").has_value());
  s->erase_prefix("greeting");
  CHECK(exists(prefix + "greeting") == 0);
  CHECK(exists(prefix + "greeting:answer") == 0);
  CHECK_THROWS_AS(yard::job_rendezvous(""), yard::Error);
}
