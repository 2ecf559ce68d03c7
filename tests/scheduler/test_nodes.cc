// A cluster of several nodes on this machine: a head and node managers on distinct loopback
// ports, each a real `yard start` process that dies with this test. This binary is the driver and
// the workers' binary. Covers placement (local first, SPREAD, node affinity, custom resources),
// placement groups (every strategy, infeasible groups, waiting for room, removal), atomic
// accounting under concurrent clients, and the loss of a node (actors restart elsewhere).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "yard/process.h"
#include "yard/internal/control_client.h"
#include "yard/internal/redis.h"
#include "resources.h"
#include "yard/internal/session.h"
#include "support.h"
#include "yard/yard.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

class Where {
 public:
  Where() = default;
  std::string node() { return yard::node_id(); }
  int restarts() { return yard::restart_count(); }
  std::string exe() { return fs::read_symlink("/proc/self/exe").string(); }
  std::string cuda() {
    const char* v = getenv("CUDA_VISIBLE_DEVICES");
    return v ? v : "<unset>";
  }
  int incr() { return ++n_; }
  int sleep_ms(int ms) {
    usleep(ms * 1000);
    return ms;
  }

 private:
  int n_ = 0;
};
YARD_ACTOR(Where, yard::ctor<>, &Where::node, &Where::restarts, &Where::incr, &Where::sleep_ms, &Where::exe, &Where::cuda);

std::string node_of_task(int ms) {
  usleep(ms * 1000);
  return yard::node_id() + " " + fs::read_symlink("/proc/self/exe").string();
}
std::string task_devices() {
  const char* v = getenv("CUDA_VISIBLE_DEVICES");
  return yard::node_id() + " " + (v ? v : "<unset>");
}
YARD_REMOTE(node_of_task, task_devices);

// What actors and tasks write with yard::log, found again by `yard logs --actor | --task`.
class Chatty {
 public:
  Chatty() { yard::log_info("chatty is made"); }
  int say(std::string s) {
    yard::log_info("chatty says " + s);
    return 1;
  }
};
YARD_ACTOR(Chatty, yard::ctor<>, &Chatty::say);
int chatty_task(std::string s) {
  yard::log_warning("the task says " + s);
  return 2;
}
YARD_REMOTE(chatty_task);

std::string yard_bin() { return getenv("YARD_BIN"); }

// Starts `yard start ... --block` tied to this process; (pid, its address).
std::pair<pid_t, std::string> start_daemon(std::vector<std::string> argv) {
  auto [pid, line] = yard::test::spawn_daemon(argv);
  REQUIRE(!line.empty());
  REQUIRE(line.rfind("ERROR", 0) != 0);
  return {pid, line.substr(0, line.find(' '))};
}

using Shell = yard::test::ShellResult;
using yard::test::sh;
using yard::test::eventually;

// head: 1 CPU. n1: 2 CPUs. n2: 2 CPUs and {"disk": 1}. n3: 2 CPUs, a short heartbeat timeout, for
// the failure cases. The driver is this process. The others keep the default timeout (4 s): with a
// short one, a node of a loaded machine (30 workers starting at once, other suites beside) missed
// its heartbeats and was declared dead under a test that did not expect it.
struct MultiNode {
  std::string home, head_addr, token;
  pid_t head_pid = 0;
  std::vector<pid_t> node_pids;
  std::map<std::string, std::string> ids;  // name -> node id
  std::unique_ptr<yard::detail::Redis> redis;

  MultiNode() {
    char tmpl[] = "/tmp/yard-nodes-test-XXXXXX";
    home = mkdtemp(tmpl);
    setenv("YARD_HOME", home.c_str(), 1);
    setenv("YARD_KEEP_DEAD_ACTORS", "20", 1);  // the head forgets older dead actors (tested below)
    auto [hp, addr] = start_daemon({yard_bin(), "start", "--head", "--block", "--port", "0", "--num-cpus", "1",
                                    "--session-dir", home + "/head"});
    head_pid = hp;
    head_addr = addr;
    token = yard::detail::read_token(home + "/head/token");
    add_node("n1", "2", "");
    add_node("n2", "2", R"({"disk": 1})", {"--num-gpus", "2"});
    add_node("n3", "2", "", {"--heartbeat-timeout", "1.5"});
    setenv("YARD_ADDRESS", head_addr.c_str(), 1);
    setenv("YARD_TOKEN", token.c_str(), 1);
    yard::init();
    ids["head"] = yard::node_id();
    auto cs = yard::detail::cluster_control_access();
    auto [rh, rp] = yard::detail::split_address(cs.address);
    redis = std::make_unique<yard::detail::Redis>(rh, rp, cs.password, 5s);
    for (auto& [name, addr] : node_addrs)
      for (auto& id : redis->cmd({"SMEMBERS", "yard:nodes"}).strings())
        if (redis->cmd({"HGET", "yard:node:" + id, "address"}).str() == addr) ids[name] = id;
  }
  void add_node(const std::string& name, const std::string& cpus, const std::string& resources,
                std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{yard_bin(), "start", "--address", head_addr, "--token", token, "--block",
                                  "--port", "0", "--num-cpus", cpus, "--session-dir", home + "/" + name};
    if (!resources.empty()) {
      argv.push_back("--resources");
      argv.push_back(resources);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto [pid, addr] = start_daemon(argv);
    node_pids.push_back(pid);
    node_addrs[name] = addr;
    node_pid[name] = pid;
  }
  yard::sched::Res avail(const std::string& name) { return yard::sched::read_res(*redis, yard::sched::avail_key(ids.at(name))); }
  yard::sched::Res total(const std::string& name) { return yard::sched::read_res(*redis, yard::sched::total_key(ids.at(name))); }
  // Everything given back: every live node's available CPUs equal its total.
  bool all_free() {
    for (auto& [name, id] : ids) {
      if (dead.count(name)) continue;
      if (std::abs(avail(name)["CPU"] - total(name)["CPU"]) > 1e-9) return false;
    }
    return true;
  }
  ~MultiNode() {
    yard::shutdown();
    redis.reset();
    // The head's Redis outlives a killed head (so a new head can take over): stop it here too.
    pid_t redis_pid = 0;
    {
      std::ifstream f(home + "/head/redis.address");
      std::string a;
      f >> a >> redis_pid;
    }
    for (auto p : node_pids) kill(p, SIGTERM);
    if (head_pid) kill(head_pid, SIGTERM);
    for (auto p : node_pids) yard::detail::terminate(p, SIGTERM, 10s);
    if (head_pid) yard::detail::terminate(head_pid, SIGTERM, 10s);
    if (redis_pid > 0 && !yard::detail::process_dead(redis_pid)) yard::detail::terminate(redis_pid, SIGTERM, 5s);
    std::error_code ec;
    if (!getenv("YARD_TEST_KEEP")) fs::remove_all(home, ec);
  }
  std::map<std::string, std::string> node_addrs;
  std::map<std::string, pid_t> node_pid;
  std::set<std::string> dead;
};

MultiNode& cluster() {
  static MultiNode c;
  return c;
}

}  // namespace

void yard_test_worker_hook(int argc, char** argv) {
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
}

TEST_CASE("nodes offer their resources; the scheduler places by resources, SPREAD and affinity", "[nodes]") {
  auto& c = cluster();
  REQUIRE(c.ids.size() == 4);
  CHECK(c.total("head")["CPU"] == 1);
  CHECK(c.total("n2")["disk"] == 1);

  // SPREAD puts four actors on four nodes.
  std::vector<yard::ActorHandle<Where>> spread;
  for (int i = 0; i < 4; ++i) spread.push_back(yard::actor<Where>().spread().remote());
  std::set<std::string> where;
  for (auto& a : spread) where.insert(*a.call(&Where::node).remote().get(60s));
  CHECK(where.size() == 4);
  // The program was uploaded once and each joined node runs its own copy, fetched by digest: no
  // shared file system is assumed.
  std::string self = fs::read_symlink("/proc/self/exe").string();
  auto digest = yard::detail::sha256_file(self);
  for (auto& a : spread) {
    auto node = *a.call(&Where::node).remote().get(30s);
    auto exe = *a.call(&Where::exe).remote().get(30s);
    if (node == c.ids["head"]) {
      CHECK(exe == self);
    } else {
      CHECK_THAT(exe, Catch::StartsWith(c.home) && Catch::EndsWith("/blobs/" + digest));
      CHECK(exe != self);
    }
  }

  // Hard affinity, and a custom resource only n2 has.
  auto pinned = yard::actor<Where>().node_affinity(c.ids["n1"]).remote();
  CHECK(*pinned.call(&Where::node).remote().get(60s) == c.ids["n1"]);
  auto disk = yard::actor<Where>().resources({{"disk", 1}}).remote();
  CHECK(*disk.call(&Where::node).remote().get(60s) == c.ids["n2"]);
  CHECK(c.avail("n2")["disk"] == 0);

  // Default policy: local first (the driver's node is the head) while it is less than half busy,
  // then the least busy node.
  auto local = yard::actor<Where>().resources({{"CPU", 0.5}}).remote();
  CHECK(*local.call(&Where::node).remote().get(60s) == c.ids["head"]);
  auto spilled = yard::actor<Where>().resources({{"CPU", 0.25}}).remote();
  CHECK(*spilled.call(&Where::node).remote().get(60s) != c.ids["head"]);

  // Infeasible requests wait for a node that could hold them; at their infeasible_timeout they
  // fail, naming what no node has.
  auto gpu = yard::actor<Where>().resources({{"GPU", 8}}).infeasible_timeout(1s).remote();
  try {
    gpu.call(&Where::node).remote().get(30s);
    FAIL("an actor asking for 8 GPUs was placed");
  } catch (const yard::InfeasibleError& e) {
    CHECK_THAT(e.what(), Catch::Contains("GPU: 8 wanted, the largest node has 2"));
  }
  // A call made once the refusal is known says the same (not that the actor died).
  CHECK_THROWS_AS(gpu.call(&Where::node).remote().get(30s), yard::InfeasibleError);
  auto nowhere = yard::actor<Where>().node_affinity("node-does-not-exist").remote();
  CHECK_THROWS_WITH(nowhere.call(&Where::node).remote().get(30s), Catch::Contains("node-does-not-exist"));
  // Soft affinity to a missing node runs anyway.
  auto soft = yard::actor<Where>().node_affinity("node-does-not-exist", true).remote();
  CHECK(!soft.call(&Where::node).remote().get(60s)->empty());

  for (auto* h : {&pinned, &disk, &local, &spilled, &soft}) h->kill();
  for (auto& a : spread) a.kill();
  CHECK(eventually([&] { return c.all_free() && c.avail("n2")["disk"] == 1; }, 20s));
}

TEST_CASE("GPUs: placed by count or share, each worker sees exactly its devices", "[nodes][gpu]") {
  auto& c = cluster();
  CHECK(c.total("n2")["GPU"] == 2);
  auto a = yard::actor<Where>().resources({{"GPU", 1}}).remote();
  auto b = yard::actor<Where>().resources({{"GPU", 1}}).remote();
  CHECK(*a.call(&Where::node).remote().get(60s) == c.ids["n2"]);
  auto da = *a.call(&Where::cuda).remote().get(30s), db = *b.call(&Where::cuda).remote().get(30s);
  CHECK(std::set<std::string>{da, db} == std::set<std::string>{"0", "1"});
  auto plain = yard::actor<Where>().node_affinity(c.ids["n2"]).remote();
  CHECK(*plain.call(&Where::cuda).remote().get(30s) == "");  // no GPU asked: none visible
  a.kill();
  // Two halves share one device.
  auto h1 = yard::actor<Where>().resources({{"GPU", 0.5}}).remote();
  auto h2 = yard::actor<Where>().resources({{"GPU", 0.5}}).remote();
  CHECK(*h1.call(&Where::cuda).remote().get(60s) == *h2.call(&Where::cuda).remote().get(60s));
  CHECK(*h1.call(&Where::cuda).remote().get(60s) == da);  // the device `a` gave back
  // A task asking for a GPU runs where one is (the driver's node has none), on a free device.
  b.kill();
  auto t = *yard::task(task_devices).resources({{"GPU", 0.25}}).remote().get(60s);
  CHECK(t.substr(0, t.find(' ')) == c.ids["n2"]);
  CHECK(t.substr(t.find(' ') + 1) == db);
  // No node has four: the task waits for one (none joins here) and fails at its timeout, saying so.
  CHECK_THROWS_WITH(yard::task(task_devices).resources({{"GPU", 4}}).infeasible_timeout(1s).remote().get(30s),
                    Catch::Contains("GPU: 4 wanted, the largest node has 2"));
  // Fractional CPUs for tasks.
  CHECK(!yard::task(task_devices).resources({{"CPU", 0.5}}).remote().get(30s)->empty());
  for (auto* h : {&b, &plain, &h1, &h2}) h->kill();
  CHECK(eventually([&] { return c.all_free() && c.avail("n2")["GPU"] == 2; }, 20s));
}

TEST_CASE("yard submit --working-dir: the job and its workers on other nodes run in a copy", "[nodes][workdir]") {
  auto& c = cluster();
  auto dir = c.home + "/project";
  fs::create_directories(dir);
  { std::ofstream(dir + "/data.txt") << "rails and sleepers\n"; }
  auto r = sh(yard_bin() + " submit --address " + c.head_addr + " --token " + c.token + " --working-dir " + dir +
              " -- " + getenv("PROBE_BIN") + " workdir " + c.ids["n2"]);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("driver: rails and sleepers"));
  CHECK_THAT(r.out, Catch::Contains("actor on " + c.ids["n2"] + ": rails and sleepers"));
  // Each node unpacked its own copy; the original was never touched by them.
  int copies = 0;
  for (auto& e : fs::recursive_directory_iterator(c.home))
    if (e.path().filename() == "data.txt" && e.path().parent_path().parent_path().filename() == "workdirs") ++copies;
  CHECK(copies == 2);  // the head's and n2's
  auto bad = sh(yard_bin() + " submit --address " + c.head_addr + " --token " + c.token +
                " --working-dir /nonexistent -- /bin/true");
  CHECK(bad.code != 0);
}

TEST_CASE("a detached actor outlives the job that made it, found by jobs of its namespace", "[nodes][detached]") {
  auto& c = cluster();
  auto yard = [&](const std::string& args) {
    return yard_bin() + " " + args + " --address " + c.head_addr + " --token " + c.token;
  };
  auto probe = std::string(getenv("PROBE_BIN"));
  auto made = sh(yard("submit --namespace line-keepers") + " -- " + probe + " detach keeper-of-the-line");
  INFO(made.out);
  REQUIRE(made.code == 0);
  // Another job sees only its own namespace's names.
  auto elsewhere = sh(yard("submit") + " -- " + probe + " use keeper-of-the-line");
  INFO(elsewhere.out);
  CHECK(elsewhere.code != 0);
  CHECK_THAT(elsewhere.out, Catch::Contains("not found") && Catch::Contains("in namespace"));
  // `yard status` shows the namespace its name lives in.
  auto shown = sh(yard("status --verbose"));
  CHECK_THAT(shown.out, Catch::Contains("'keeper-of-the-line' in line-keepers"));
  // Its job has ended; the actor has not, and a job of its namespace finds it.
  auto used = sh(yard("submit --namespace line-keepers") + " -- " + probe + " use keeper-of-the-line");
  INFO(used.out);
  CHECK(used.code == 0);
  CHECK_THAT(used.out, Catch::Contains("found keeper-of-the-line on node-"));
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("a job's default actor lifetime: detached when the job says so, unless an actor chooses", "[nodes][detached]") {
  auto& c = cluster();
  auto yard = [&](const std::string& args) {
    return yard_bin() + " " + args + " --address " + c.head_addr + " --token " + c.token + " --namespace lifetimes";
  };
  auto probe = std::string(getenv("PROBE_BIN"));
  // A job whose default is detached: its actor outlives it; the one that chose not to does not.
  auto made = sh(yard("submit --env YARD_DEFAULT_ACTOR_LIFETIME=detached") + " -- " + probe + " default-lifetime kept");
  INFO(made.out);
  REQUIRE(made.code == 0);
  auto found = sh(yard("submit") + " -- " + probe + " use kept");
  INFO(found.out);
  CHECK(found.code == 0);
  CHECK_THAT(found.out, Catch::Contains("found kept on node-"));
  auto own = sh(yard("submit") + " -- " + probe + " use kept-own");
  INFO(own.out);
  CHECK(own.code != 0);
  CHECK_THAT(own.out, Catch::Contains("not found"));
  // A job without the setting: its actors end with it (Ray's default), as soon as the head has
  // ended the job (`yard submit` returns when its program has exited).
  auto plain = sh(yard("submit") + " -- " + probe + " default-lifetime gone");
  INFO(plain.out);
  REQUIRE(plain.code == 0);
  CHECK(eventually([&] { return sh(yard("submit") + " -- " + probe + " find gone").code == 4; }, 30s));
  // A value the runtime does not know is refused before the job starts anything.
  auto bad = sh(yard("submit --env YARD_DEFAULT_ACTOR_LIFETIME=forever") + " -- " + probe + " default-lifetime never");
  INFO(bad.out);
  CHECK(bad.code != 0);
  CHECK_THAT(bad.out, Catch::Contains("YARD_DEFAULT_ACTOR_LIFETIME is 'forever'"));
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("what an actor's or a task's code logs is found by yard logs --actor and --task", "[nodes][logs]") {
  auto& c = cluster();
  auto yard = [&](const std::string& args) {
    return yard_bin() + " " + args + " --address " + c.head_addr + " --token " + c.token;
  };
  auto a = yard::actor<Chatty>().name("chatty", "talkers").remote();
  REQUIRE(*a.call(&Chatty::say).remote(std::string("hello")).get(60s) == 1);
  auto t = yard::task(chatty_task).remote(std::string("there"));
  REQUIRE(*t.get(60s) == 2);
  // By name (in the one namespace that has it), with the constructor's line first.
  auto by_name = sh(yard("logs --actor chatty"));
  INFO(by_name.out);
  CHECK(by_name.code == 0);
  CHECK_THAT(by_name.out, Catch::Contains("[actor " + a.id() + " Chatty 'chatty'] chatty says hello"));
  CHECK(by_name.out.find("chatty is made") < by_name.out.find("chatty says hello"));
  CHECK_THAT(by_name.out, !Catch::Contains("the task says"));
  // By id and namespace alike.
  CHECK_THAT(sh(yard("logs --actor " + a.id())).out, Catch::Contains("chatty says hello"));
  CHECK_THAT(sh(yard("logs --actor chatty --namespace talkers")).out, Catch::Contains("chatty says hello"));
  // A task's lines, by its result's id, and nothing of the actor's.
  auto by_task = sh(yard("logs --task " + t.id()));
  INFO(by_task.out);
  CHECK(by_task.code == 0);
  CHECK_THAT(by_task.out, Catch::Contains("[task " + t.id() + " chatty_task] the task says there"));
  CHECK_THAT(by_task.out, !Catch::Contains("chatty says"));
  // An actor nobody made, one named in another namespace, and a request naming two things.
  auto nobody = sh(yard("logs --actor nobody"));
  CHECK(nobody.code != 0);
  CHECK_THAT(nobody.out, Catch::Contains("no actor 'nobody'"));
  CHECK(sh(yard("logs --actor chatty --namespace elsewhere")).code != 0);
  CHECK(sh(yard("logs --actor chatty --task " + t.id())).code == 2);
  a.kill();
}

TEST_CASE("a job's variables reach its workers on every node; an actor's or a task's runtime_env adds to them",
          "[nodes][env]") {
  auto& c = cluster();
  auto yard = [&](const std::string& args) {
    return yard_bin() + " " + args + " --address " + c.head_addr + " --token " + c.token;
  };
  auto probe = std::string(getenv("PROBE_BIN"));
  auto run = sh(yard("submit --env SY_PROBE_VAR=from-submit") + " -- " + probe + " env SY_PROBE_VAR");
  INFO(run.out);
  REQUIRE(run.code == 0);
  CHECK_THAT(run.out, Catch::Contains("driver: from-submit"));
  CHECK_THAT(run.out, Catch::Contains("task: from-submit"));
  CHECK_THAT(run.out, Catch::Contains("actor: from-submit"));
  CHECK_THAT(run.out, Catch::Contains("own: the-actor's-own in /tmp"));
  CHECK_THAT(run.out, Catch::Contains("task-own: the-actor's-own in /tmp"));
  CHECK_THAT(run.out, Catch::Contains("task-after: from-submit"));
}

TEST_CASE("the head forgets old dead actors, keeping the most recent", "[nodes][actors]") {
  auto& c = cluster();
  std::vector<yard::ActorHandle<Where>> many;
  for (int i = 0; i < 30; ++i) many.push_back(yard::actor<Where>().remote());
  for (auto& a : many) *a.call(&Where::incr).remote().get(60s);
  for (auto& a : many) a.kill();
  auto dead_known = [&] {
    int n = 0;
    for (auto& id : c.redis->cmd({"SMEMBERS", "yard:actors"}).strings())
      n += c.redis->cmd({"HGET", "yard:actor:" + id, "state"}).str() == "DEAD";
    return n;
  };
  CHECK(eventually([&] { return dead_known() <= 20; }, 20s));
  // A handle to a forgotten actor still says it is dead.
  CHECK_THROWS_AS(many.front().call(&Where::incr).remote().get(30s), yard::ActorDied);
}

TEST_CASE("tasks spill over to other nodes when the local node is full", "[nodes][tasks]") {
  auto& c = cluster();
  // The head (the driver's node) has one CPU: eight 400 ms tasks do not all wait for it.
  std::vector<yard::ObjectRef<std::string>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(yard::task(node_of_task).remote(400));
  std::set<std::string> nodes;
  for (auto& r : refs) {
    auto v = *r.get(60s);
    auto node = v.substr(0, v.find(' '));
    nodes.insert(node);
    if (node != c.ids["head"]) CHECK_THAT(v, Catch::Contains("/blobs/"));  // a fetched copy of this program
  }
  CHECK(nodes.size() >= 2);
  // Node affinity for tasks: hard (to a live node, or an error naming the missing one) and soft.
  auto on3 = *yard::task(node_of_task).node_affinity(c.ids["n3"]).remote(0).get(60s);
  CHECK(on3.substr(0, on3.find(' ')) == c.ids["n3"]);
  CHECK_THROWS_WITH(yard::task(node_of_task).node_affinity("node-gone").remote(0).get(30s), Catch::Contains("node-gone"));
  CHECK(!yard::task(node_of_task).node_affinity("node-gone", true).remote(0).get(60s)->empty());
  // SPREAD: short tasks land on several nodes even though the local node has room. (Once the
  // tasks above gave their leases back: a node that still shows them busy has no room to offer.)
  CHECK(eventually([&] { return c.all_free(); }, 20s));
  std::vector<yard::ObjectRef<std::string>> spread;
  for (int i = 0; i < 6; ++i) spread.push_back(yard::task(node_of_task).spread().remote(200));
  std::set<std::string> spread_nodes;
  for (auto& r : spread) {
    auto v = *r.get(60s);
    spread_nodes.insert(v.substr(0, v.find(' ')));
  }
  CHECK(spread_nodes.size() >= 2);
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("placement groups: every strategy, infeasible groups, waiting for room, removal", "[nodes][pg]") {
  auto& c = cluster();
  using S = yard::PlacementStrategy;

  // STRICT_SPREAD over three nodes: one bundle per node; actors in the bundles run there.
  auto ss = yard::placement_group({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, S::kStrictSpread);
  REQUIRE(ss.wait(30s));
  auto nodes = ss.bundle_nodes();
  CHECK(std::set<std::string>(nodes.begin(), nodes.end()).size() == 3);
  std::vector<yard::ActorHandle<Where>> in;
  for (int i = 0; i < 3; ++i) in.push_back(yard::actor<Where>().resources({{"CPU", 1}}).placement_group(ss, i).remote());
  for (int i = 0; i < 3; ++i) CHECK(*in[i].call(&Where::node).remote().get(60s) == nodes[i]);
  // The bundle is full: a fourth actor asking for bundle 0 waits, and dies with the group.
  auto extra = yard::actor<Where>().resources({{"CPU", 1}}).placement_group(ss, 0).remote();
  auto extra_node = extra.call(&Where::node).remote();
  CHECK(yard::wait(std::vector{extra_node}, 1, 300ms).ready.empty());
  ss.remove();
  CHECK_THROWS_AS(extra_node.get(30s), yard::ActorDied);
  // Removal is asynchronous: the group's actors are stopped a moment later.
  CHECK(eventually([&] {
    try {
      in[0].call(&Where::node).remote().get(30s);
      return false;
    } catch (const yard::ActorDied&) {
      return true;
    }
  }, 10s));
  CHECK(eventually([&] { return c.all_free(); }, 20s));

  // PACK fills one node first.
  auto pack = yard::placement_group({{{"CPU", 1}}, {{"CPU", 1}}}, S::kPack);
  REQUIRE(pack.wait(30s));
  CHECK(pack.bundle_nodes()[0] == pack.bundle_nodes()[1]);
  pack.remove();
  // STRICT_PACK: all on one node, or nowhere.
  auto sp = yard::placement_group({{{"CPU", 1}}, {{"CPU", 0.5}}}, S::kStrictPack);
  REQUIRE(sp.wait(30s));
  CHECK(sp.bundle_nodes()[0] == sp.bundle_nodes()[1]);
  sp.remove();
  // SPREAD: distinct nodes while there are enough.
  auto spread = yard::placement_group({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, S::kSpread);
  REQUIRE(spread.wait(30s));
  auto sn = spread.bundle_nodes();
  CHECK(std::set<std::string>(sn.begin(), sn.end()).size() == 4);
  spread.remove();

  // Groups no arrangement of the nodes can hold are created pending, waiting for nodes that could
  // join (none does here; the reason is in yard status, checked by the cli test), and are removed.
  for (auto g : {yard::placement_group({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, S::kStrictSpread),
                 yard::placement_group({{{"CPU", 2}}, {{"CPU", 1}}}, S::kStrictPack), yard::placement_group({{{"TPU", 1}}})}) {
    CHECK_FALSE(g.wait(300ms));
    CHECK(g.bundle_nodes()[0].empty());
    g.remove();
  }

  // A feasible group that does not fit now waits for room, then is created.
  auto big = yard::placement_group({{{"CPU", 2}}, {{"CPU", 2}}, {{"CPU", 2}}}, S::kStrictSpread);
  REQUIRE(big.wait(30s));
  auto blocked = yard::placement_group({{{"CPU", 2}}});
  CHECK_FALSE(blocked.wait(300ms));
  big.remove();
  CHECK(blocked.wait(30s));
  blocked.remove();
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("tasks and actors share a placement-group bundle's resources", "[nodes][pg][tasks]") {
  auto& c = cluster();
  auto g = yard::placement_group({{{"CPU", 2}}}, yard::PlacementStrategy::kStrictPack);
  REQUIRE(g.wait(30s));
  auto node = g.bundle_nodes()[0];
  auto node_name = std::find_if(c.ids.begin(), c.ids.end(), [&](auto& kv) { return kv.second == node; })->first;
  double node_free = c.avail(node_name)["CPU"];
  std::vector<yard::ObjectRef<std::string>> refs;
  for (int i = 0; i < 6; ++i) refs.push_back(yard::task(node_of_task).placement_group(g, 0).remote(200));
  for (auto& r : refs) {
    auto v = *r.get(60s);
    CHECK(v.substr(0, v.find(' ')) == node);
  }
  // The tasks used the bundle's CPUs, never more of the node's.
  CHECK(c.avail(node_name)["CPU"] <= node_free + 1e-9);
  auto a = yard::actor<Where>().resources({{"CPU", 1}}).placement_group(g, 0).remote();
  CHECK(*a.call(&Where::node).remote().get(60s) == node);
  // With the actor holding one of the bundle's CPUs, the bundle has one left for tasks.
  CHECK(eventually([&] {
    return c.redis->cmd({"HGET", "yard:pgb:" + g.id() + ":0", "CPU"}).str() == "1";
  }, 20s));
  auto t = *yard::task(node_of_task).placement_group(g).remote(0).get(60s);
  CHECK(t.substr(0, t.find(' ')) == node);
  CHECK_THROWS_AS(yard::task(node_of_task).resources({{"CPU", 3}}).placement_group(g, 0).remote(0).get(30s),
                  yard::InfeasibleError);
  g.remove();  // asynchronous: its actor is stopped a moment later
  CHECK(eventually([&] {
    try {
      a.call(&Where::node).remote().get(30s);
      return false;
    } catch (const yard::ActorDied&) {
      return true;
    }
  }, 10s));
  CHECK(eventually([&] { return c.all_free(); }, 20s));
  CHECK(eventually([&] { return c.redis->cmd({"EXISTS", "yard:pgb:" + g.id() + ":0"}).integer() == 0; }, 5s));
}

TEST_CASE("concurrent clients never over-commit a node", "[nodes][pg]") {
  auto& c = cluster();
  // Four clients of the control store race for one node's CPUs through the reservation script.
  auto cs = yard::detail::cluster_control_access();
  auto [rh, rp] = yard::detail::split_address(cs.address);
  const std::string node = c.ids["n1"];
  std::atomic<int> granted{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, rh = rh, rp = rp] {
      yard::detail::Redis r(rh, rp, cs.password, 5s);
      for (int i = 0; i < 50; ++i)
        if (!yard::sched::reserve(r, {{node, {{"CPU", 0.125}}}})) ++granted;
    });
  for (auto& t : ts) t.join();
  CHECK(granted.load() == 16);  // 2 CPUs / 0.125, not one more
  CHECK(c.avail("n1")["CPU"] == Approx(0).margin(1e-9));
  yard::sched::release(*c.redis, node, {{"CPU", 2.0}});
  CHECK(c.avail("n1")["CPU"] == 2);

  // Four driver threads placing groups and actors at once: never below zero anywhere, and
  // everything back at the end.
  std::atomic<bool> stop{false};
  std::atomic<bool> negative{false};
  std::thread watch([&] {
    while (!stop.load()) {
      for (auto& [name, id] : c.ids)
        if (!c.dead.count(name)) {
          for (auto& [k, v] : c.avail(name))
            if (v < -1e-9) negative = true;
        }
      std::this_thread::sleep_for(5ms);
    }
  });
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      try {
        for (int i = 0; i < 20; ++i) {
          auto g = yard::placement_group({{{"CPU", 1}}, {{"CPU", 1}}}, yard::PlacementStrategy::kSpread);
          if (!g.wait(30s)) ++failures;
          g.remove();
        }
      } catch (const std::exception& e) {
        UNSCOPED_INFO(e.what());
        ++failures;
      }
    });
  for (auto& t : clients) t.join();
  stop = true;
  watch.join();
  CHECK(failures.load() == 0);
  CHECK_FALSE(negative.load());
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("kill -9 of the head service: actors on every node, the head's included, keep serving; a restarted head "
          "takes the cluster over", "[nodes][head]") {
  auto& c = cluster();
  auto n2 = c.ids["n2"];
  auto head_node = c.ids["head"];
  auto on_head = yard::actor<Where>().node_affinity(head_node, true).max_restarts(1).remote();
  auto keeper = yard::actor<Where>().node_affinity(n2, true).max_restarts(1).remote();
  auto named = yard::actor<Where>().name("survivor").node_affinity(n2, true).remote();
  REQUIRE(*on_head.call(&Where::node).remote().get(60s) == head_node);
  REQUIRE(*keeper.call(&Where::node).remote().get(60s) == n2);
  REQUIRE(*named.call(&Where::node).remote().get(60s) == n2);
  CHECK(*named.call(&Where::incr).remote().get(30s) == 1);
  auto pg = yard::placement_group({{{"CPU", 1}}}, yard::PlacementStrategy::kStrictSpread);
  REQUIRE(pg.wait(30s));
  auto pg_nodes = pg.bundle_nodes();

  // Both actors serve calls in a loop, through the kill and the takeover: none may fail, and each
  // answers in order (its count goes up by one per call: the same process throughout).
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, disorder{0};
  std::atomic<int> served_head{0}, served_n2{0};
  std::thread loop([&] {
    while (!stop.load()) {
      for (auto [h, served] : {std::pair{&on_head, &served_head}, std::pair{&keeper, &served_n2}}) {
        try {
          int n = *h->call(&Where::incr).remote().get(30s);
          if (n != served->load() + 1) ++disorder;
          served->store(n);
        } catch (const std::exception& e) {
          UNSCOPED_INFO(e.what());
          ++failures;
        }
      }
    }
  });
  REQUIRE(eventually([&] { return served_head.load() >= 5 && served_n2.load() >= 5; }, 30s));
  kill(c.head_pid, SIGKILL);
  REQUIRE(eventually([&] { return yard::detail::process_dead(c.head_pid); }, 10s));
  // Calls go straight to the actors: they keep working while there is no head.
  int head_before = served_head.load(), n2_before = served_n2.load();
  CHECK(eventually([&] { return served_head.load() >= head_before + 20 && served_n2.load() >= n2_before + 20; }, 30s));
  CHECK(*named.call(&Where::incr).remote().get(30s) == 2);

  // An actor asked for while there is no head is created once one is back.
  auto during = yard::actor<Where>().spread().remote();
  // A head started again at the same address takes the cluster over from its Redis; the head's
  // node kept running and stays the head's node.
  auto port = c.head_addr.substr(c.head_addr.rfind(':') + 1);
  auto [pid, addr] = start_daemon({yard_bin(), "start", "--head", "--block", "--port", port, "--num-cpus", "1",
                                   "--session-dir", c.home + "/head"});
  c.head_pid = pid;
  CHECK(addr == c.head_addr);
  CHECK(yard::detail::read_token(c.home + "/head/token") == c.token);
  CHECK(c.redis->cmd({"HGET", "yard:cluster", "head_node"}).str() == head_node);
  head_before = served_head.load(), n2_before = served_n2.load();
  CHECK(eventually([&] { return served_head.load() >= head_before + 20 && served_n2.load() >= n2_before + 20; }, 30s));
  stop = true;
  loop.join();
  CHECK(failures.load() == 0);
  CHECK(disorder.load() == 0);
  // Nothing was lost: the named actor, the actor table, the placement group, this job.
  auto found = yard::get_actor<Where>("survivor");
  CHECK(*found.call(&Where::incr).remote().get(30s) == 3);
  CHECK(*keeper.call(&Where::restarts).remote().get(30s) == 0);
  CHECK(*on_head.call(&Where::restarts).remote().get(30s) == 0);
  CHECK(pg.bundle_nodes() == pg_nodes);
  auto status = sh(yard_bin() + " status --json --address " + c.head_addr + " --token " + c.token);
  REQUIRE(status.code == 0);
  auto doc = nlohmann::json::parse(status.out);
  std::map<std::string, std::string> state;
  for (auto& a : doc["actors"]) state[a["actor_id"].get<std::string>()] = a["state"].get<std::string>();
  CHECK(state[on_head.id()] == "ALIVE");
  CHECK(state[keeper.id()] == "ALIVE");
  CHECK_THAT(status.out, Catch::Contains("survivor") && Catch::Contains(pg.id()) && Catch::Contains("RUNNING"));
  // And it schedules again.
  auto fresh = yard::actor<Where>().spread().remote();
  CHECK(!fresh.call(&Where::node).remote().get(60s)->empty());
  CHECK(!during.call(&Where::node).remote().get(60s)->empty());
  pg.remove();
  for (auto* h : {&on_head, &keeper, &named, &fresh, &during}) h->kill();
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("Redis restarts mid-run: every daemon reconnects and nothing is lost", "[nodes][redis]") {
  auto& c = cluster();
  auto keeper = yard::actor<Where>().node_affinity(c.ids["n2"], true).max_restarts(1).remote();
  CHECK(*keeper.call(&Where::incr).remote().get(60s) == 1);
  auto pg = yard::placement_group({{{"CPU", 1}}});
  REQUIRE(pg.wait(30s));
  std::string addr;
  pid_t pid = 0;
  {
    std::ifstream f(c.home + "/head/redis.address");
    f >> addr >> pid;
  }
  REQUIRE(pid > 0);
  // As the head started it (redis-server rewrites its own command line, so it is not read back).
  std::vector<std::string> argv{"/usr/bin/redis-server", c.home + "/head/redis/redis.conf", "--port",
                                addr.substr(addr.rfind(':') + 1), "--bind", "127.0.0.1", "--dir", c.home + "/head/redis",
                                "--appendonly", "yes", "--save", "", "--daemonize", "no"};
  kill(pid, SIGTERM);  // a clean restart (an upgrade, a config change): its append-only file is complete
  REQUIRE(eventually([&] { return yard::detail::process_dead(pid); }, 10s));
  yard::detail::SpawnOptions so;
  so.death_signal = SIGKILL;
  so.stdout_path = c.home + "/redis-restarted.log";
  pid_t again = yard::detail::spawn(argv, so);
  { std::ofstream(c.home + "/head/redis.address") << addr << " " << again << "\n"; }
  // The control store's clients reconnect: placement works again, and the state is all there.
  REQUIRE(eventually([&] {
    try {
      return c.redis->cmd({"PING"}).str() == "PONG";
    } catch (const std::exception&) {
      return false;
    }
  }, 10s));
  auto g = yard::placement_group({{{"CPU", 1}}});
  CHECK(g.wait(30s));
  CHECK(c.redis->cmd({"HGET", "yard:pg:" + pg.id(), "state"}).str() == "CREATED");
  auto fresh = yard::actor<Where>().spread().remote();
  CHECK(!fresh.call(&Where::node).remote().get(60s)->empty());
  CHECK(*keeper.call(&Where::incr).remote().get(30s) == 2);
  // Heartbeats resumed: no node was declared dead.
  std::this_thread::sleep_for(4500ms);  // longer than the heartbeat timeouts, to let a wrong verdict happen
  for (auto& [name, id] : c.ids)
    if (!c.dead.count(name)) CHECK(c.redis->cmd({"HGET", "yard:node:" + id, "state"}).str() == "ALIVE");
  g.remove();
  pg.remove();
  keeper.kill();
  fresh.kill();
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("yard drain: restartable actors move, the rest is waited for, then the node leaves", "[nodes][drain]") {
  auto& c = cluster();
  auto n1 = c.ids["n1"];
  auto yard = [&](const std::string& args) {
    return yard_bin() + " " + args + " --address " + c.head_addr + " --token " + c.token;
  };
  auto mover = yard::actor<Where>().node_affinity(n1, true).max_restarts(1).resources({{"CPU", 1}}).remote();
  auto stayer = yard::actor<Where>().node_affinity(n1, true).resources({{"CPU", 1}}).remote();
  REQUIRE(*mover.call(&Where::node).remote().get(60s) == n1);
  REQUIRE(*stayer.call(&Where::node).remote().get(60s) == n1);
  CHECK(*mover.call(&Where::incr).remote().get(30s) == 1);

  // A drain that cannot finish in time says what is left, and the node takes no new work.
  auto r = sh(yard("drain " + n1 + " --timeout 1"));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains(stayer.id()) && Catch::Contains("--force"));
  CHECK(*mover.call(&Where::node).remote().get(60s) != n1);
  CHECK(*mover.call(&Where::restarts).remote().get(30s) == 1);
  auto fresh = yard::actor<Where>().node_affinity(n1, true).remote();
  CHECK(*fresh.call(&Where::node).remote().get(60s) != n1);
  CHECK(*stayer.call(&Where::incr).remote().get(30s) == 1);  // still serving meanwhile
  auto status = sh(yard("status"));
  CHECK_THAT(status.out, Catch::Contains("DRAINING"));

  // Drained for good once its last actor ends: the node process exits and leaves the cluster.
  Shell r2;
  std::thread t([&] { r2 = sh(yard("drain " + n1 + " --timeout 60")); });
  std::this_thread::sleep_for(300ms);  // the drain is waiting (not a synchronisation: it would also finish)
  stayer.kill();
  t.join();
  INFO(r2.out);
  CHECK(r2.code == 0);
  CHECK(eventually([&] { return yard::detail::process_dead(c.node_pid["n1"]); }, 15s));
  c.dead.insert("n1");
  auto members = c.redis->cmd({"SMEMBERS", "yard:nodes"}).strings();
  CHECK(std::find(members.begin(), members.end(), n1) == members.end());
  CHECK(*mover.call(&Where::incr).remote().get(30s) == 1);  // the moved actor started afresh
  mover.kill();
  fresh.kill();
  // Unknown nodes and the head are refused with the reason.
  CHECK_THAT(sh(yard("drain node-nope --timeout 1")).out, Catch::Contains("no live node"));
  CHECK_THAT(sh(yard("drain " + c.ids["head"] + " --timeout 1")).out, Catch::Contains("is the head"));
}

TEST_CASE("a node paused past its heartbeat timeout comes back empty and takes work again", "[nodes][failure]") {
  auto& c = cluster();
  auto n3 = c.ids["n3"];
  REQUIRE(eventually([&] { return c.all_free(); }, 20s));
  // A task worker of this job stays in n3's pool after its task, and an actor lives there. (Run
  // alone, this case may start before the head has seen n3.)
  REQUIRE(eventually([&] {
    try {
      auto v = *yard::task(node_of_task).node_affinity(n3).remote(0).get(60s);
      return v.substr(0, v.find(' ')) == n3;
    } catch (const yard::Error&) {
      return false;
    }
  }, 20s));
  auto old = yard::actor<Where>().node_affinity(n3).resources({{"CPU", 1}}).remote();
  REQUIRE(*old.call(&Where::node).remote().get(60s) == n3);

  // Paused (a stalled machine, a long swap storm) longer than the heartbeat timeout: declared dead.
  pid_t pid = c.node_pid["n3"];
  REQUIRE(kill(pid, SIGSTOP) == 0);
  struct Resume {
    pid_t pid;
    ~Resume() { kill(pid, SIGCONT); }
  } resume{pid};
  CHECK(eventually([&] { return c.redis->cmd({"EXISTS", yard::sched::avail_key(n3)}).integer() == 0; }, 15s));
  kill(pid, SIGCONT);
  // It stops what it ran (the head has given that up), and offers all of its resources again:
  // a new actor that must run there is placed and answers.
  CHECK(eventually([&] { return c.redis->cmd({"EXISTS", yard::sched::avail_key(n3)}).integer() == 1; }, 20s));
  auto fresh = yard::actor<Where>().node_affinity(n3).resources({{"CPU", 1}}).remote();
  CHECK(*fresh.call(&Where::node).remote().get(30s) == n3);
  CHECK_THROWS_AS(old.call(&Where::node).remote().get(30s), yard::ActorDied);
  fresh.kill();
  CHECK(eventually([&] { return c.all_free(); }, 20s));
}

TEST_CASE("kill -9 of a node: its actors restart on other nodes; calls after that succeed", "[nodes][failure]") {
  auto& c = cluster();
  auto n3 = c.ids["n3"];
  REQUIRE(eventually([&] { return c.all_free(); }, 20s));  // workers leased earlier have gone back
  auto keeper = yard::actor<Where>().node_affinity(n3, true).max_restarts(2).resources({{"CPU", 1}}).remote();
  auto mortal = yard::actor<Where>().node_affinity(n3, true).resources({{"CPU", 1}}).remote();
  REQUIRE(*keeper.call(&Where::node).remote().get(60s) == n3);
  REQUIRE(*mortal.call(&Where::node).remote().get(60s) == n3);
  CHECK(*keeper.call(&Where::incr).remote().get(30s) == 1);
  CHECK(*keeper.call(&Where::restarts).remote().get(30s) == 0);
  // A group with a bundle on each live node: the one on n3 is placed again after its death.
  // (Bundles of a little memory: n3's CPUs are taken by the two actors.)
  auto pg = yard::placement_group({{{"memory", 1e6}}, {{"memory", 1e6}}, {{"memory", 1e6}}}, yard::PlacementStrategy::kSpread);
  REQUIRE(pg.wait(30s));
  auto before = pg.bundle_nodes();
  REQUIRE(std::find(before.begin(), before.end(), n3) != before.end());
  auto in_flight = keeper.call(&Where::sleep_ms).remote(30000);
  auto mortal_flight = mortal.call(&Where::sleep_ms).remote(30000);
  std::this_thread::sleep_for(200ms);  // let the calls reach the actors (not a synchronisation)

  kill(c.node_pid["n3"], SIGKILL);
  c.dead.insert("n3");
  auto t0 = std::chrono::steady_clock::now();
  // The call that was running fails with ActorRestarting; the next ones run on the new process.
  CHECK_THROWS_AS(in_flight.get(60s), yard::ActorRestarting);
  auto node_after = *keeper.call(&Where::node).remote().get(60s);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(node_after != n3);
  CHECK(took < 15);
  CHECK(*keeper.call(&Where::restarts).remote().get(30s) == 1);
  CHECK(*keeper.call(&Where::incr).remote().get(30s) == 1);  // a new process: state starts over
  // Without restarts the actor is dead, and says why.
  try {
    mortal_flight.get(60s);
    FAIL("a call on an actor of a dead node returned");
  } catch (const yard::ActorRestarting&) {
    FAIL("an actor with max_restarts 0 was restarted");
  } catch (const yard::ActorDied& e) {
    CHECK_THAT(e.what(), Catch::Contains("died"));
  }
  CHECK_THROWS_AS(mortal.call(&Where::node).remote().get(30s), yard::ActorDied);
  // The dead node's resources are gone from the scheduler's view; the others are whole again.
  CHECK(c.redis->cmd({"EXISTS", yard::sched::avail_key(n3)}).integer() == 0);
  CHECK(eventually([&] {
    auto now = pg.bundle_nodes();
    return std::find(now.begin(), now.end(), n3) == now.end() && std::find(now.begin(), now.end(), "") == now.end();
  }, 15s));
  pg.remove();
  keeper.kill();
  CHECK(eventually([&] { return c.all_free(); }, 20s));
  for (auto& [name, id] : c.ids)
    if (!c.dead.count(name)) UNSCOPED_INFO(name << ": " << c.avail(name)["CPU"] << " of " << c.total(name)["CPU"]);
}
