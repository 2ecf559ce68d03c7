// A cluster of 200 simulated nodes (`yard start --simulate`) on one real head and its Redis: actors
// spread over all of them answer from the simulator's process, a node killed with its process is
// declared dead and its actor restarts elsewhere, the head is killed and taken over, and status
// answers throughout. This binary is the driver.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "yard/internal/session.h"
#include "support.h"
#include "yard/process.h"
#include "yard/simulated.h"
#include "yard/yard.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using json = nlohmann::json;
using yard::SimulatedCounter;
using yard::test::eventually;
using yard::test::sh;

namespace {

std::string yard_bin() { return getenv("YARD_BIN"); }

constexpr int kNodes = 200;  // simulated: 199 in one process, 1 (the one killed) in another
const char* kTimeout = "2";  // heartbeat timeout, seconds

std::pair<pid_t, std::string> start_daemon(const std::vector<std::string>& argv) {
  auto [pid, line] = yard::test::spawn_daemon(argv, 60s);
  INFO(line);
  REQUIRE(!line.empty());
  REQUIRE(line.rfind("ERROR", 0) != 0);
  return {pid, line.substr(0, line.find(' '))};
}

struct SimCluster {
  std::string home, head_addr, token;
  pid_t head_pid = 0, sims_pid = 0, victim_pid = 0;
  std::string victim_addr;

  explicit SimCluster(int nodes = kNodes) {
    char tmpl[] = "/tmp/yard-scale-test-XXXXXX";
    home = mkdtemp(tmpl);
    setenv("YARD_HOME", home.c_str(), 1);
    std::tie(head_pid, head_addr) = start_head("0");
    token = yard::detail::read_token(home + "/head/token");
    auto sim = [&](int n, const std::string& dir) {
      return start_daemon({yard_bin(), "start", "--address", head_addr, "--token", token, "--block", "--simulate",
                           std::to_string(n), "--num-cpus", "1", "--resources", R"({"sim": 2})", "--heartbeat-timeout",
                           kTimeout, "--session-dir", home + "/" + dir});
    };
    sims_pid = sim(nodes - 1, "sims").first;
    std::tie(victim_pid, victim_addr) = sim(1, "victim");
    setenv("YARD_ADDRESS", head_addr.c_str(), 1);
    setenv("YARD_TOKEN", token.c_str(), 1);
  }
  std::pair<pid_t, std::string> start_head(const std::string& port) {
    return start_daemon({yard_bin(), "start", "--head", "--block", "--port", port, "--num-cpus", "1",
                         "--heartbeat-timeout", kTimeout, "--session-dir", home + "/head"});
  }
  json status() {
    auto r = sh(yard_bin() + " status --json --address " + head_addr + " --token " + token);
    INFO(r.out);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
  }
  pid_t redis_pid() const {
    pid_t pid = 0;
    std::string addr;
    std::ifstream(home + "/head/redis.address") >> addr >> pid;
    return pid;
  }
  ~SimCluster() {
    pid_t redis_pid = this->redis_pid();
    for (pid_t p : {victim_pid, sims_pid, head_pid})
      if (p > 0) yard::detail::terminate(p, SIGTERM, 10s);
    // The head's node manager and Redis outlive a killed head.
    if (auto hn = std::ifstream(home + "/head/head-node.pid")) {
      pid_t p = 0;
      hn >> p;
      if (p > 0 && !yard::detail::process_dead(p)) yard::detail::terminate(p, SIGTERM, 10s);
    }
    if (redis_pid > 0 && !yard::detail::process_dead(redis_pid)) yard::detail::terminate(redis_pid, SIGTERM, 5s);
    std::error_code ec;
    if (!getenv("YARD_TEST_KEEP")) fs::remove_all(home, ec);
  }
};

// Calls `add(x)` until it answers (an actor restarting after its node died answers once it is
// back); nullopt when it never does.
std::optional<int64_t> add_eventually(yard::ActorHandle<SimulatedCounter>& a, int64_t x, std::chrono::seconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    try {
      return *a.call(&SimulatedCounter::add).remote(x).get(10s);
    } catch (const std::exception& e) {
      UNSCOPED_INFO(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

void yard_test_worker_hook(int argc, char** argv) {
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
}

TEST_CASE("200 simulated nodes: actors spread over all answer; a lost node is declared dead and its actor restarts; "
          "the head is taken over; status answers", "[scale]") {
  SimCluster c;
  auto st = c.status();
  REQUIRE(st["nodes"].size() == kNodes + 1);  // and the head's own node
  std::map<std::string, std::string> node_at;  // address -> node id
  for (auto& n : st["nodes"]) {
    CHECK(n["alive"].get<bool>());
    node_at[n.value("address", "")] = n["node_id"].get<std::string>();
  }
  REQUIRE(node_at.count(c.victim_addr));
  std::string victim = node_at[c.victim_addr];

  yard::init();
  std::vector<yard::ActorHandle<SimulatedCounter>> actors;
  for (int i = 0; i < kNodes; ++i)
    actors.push_back(
        yard::actor<SimulatedCounter>(int64_t{1000} * i).resources({{"sim", 1}}).spread().max_restarts(1).remote());
  for (int i = 0; i < kNodes; ++i) CHECK(*actors[i].call(&SimulatedCounter::add).remote(int64_t{7}).get(60s) == 1000 * i + 7);
  CHECK(*actors[3].call(&SimulatedCounter::echo).remote(std::string("railway")).get(30s) == "railway");

  // SPREAD put one on every simulated node (each offers room for two).
  std::map<std::string, std::string> node_of;  // actor id -> node id
  st = c.status();
  std::set<std::string> hosting;
  for (auto& n : st["nodes"])
    if (!n["actors"].empty()) hosting.insert(n["node_id"].get<std::string>());
  CHECK(hosting.size() == kNodes);
  for (auto& a : st["actors"]) node_of[a["actor_id"].get<std::string>()] = a.value("node", "");
  int on_victim = -1;
  for (int i = 0; i < kNodes; ++i)
    if (node_of[actors[i].id()] == victim) on_victim = i;
  REQUIRE(on_victim >= 0);

  // Tasks: a lease asked of a simulated node (node affinity sends it there) takes the node's CPU
  // in the control store, the tasks run in the simulator's process, and the idle lease goes back.
  std::vector<std::string> picks;
  for (auto& [aid, node] : node_of)
    if (node != victim && picks.size() < 4) picks.push_back(node);
  for (auto& node : picks) {
    INFO(node);
    CHECK(*yard::task(yard::simulated_add).node_affinity(node).remote(int64_t{40}, int64_t{2}).get(60s) == 42);
    CHECK(*yard::task(yard::simulated_pid).node_affinity(node).remote().get(60s) == c.sims_pid);
  }
  std::vector<yard::ObjectRef<int64_t>> sums;
  for (int i = 0; i < 50; ++i) sums.push_back(yard::task(yard::simulated_add).node_affinity(picks[0]).remote(int64_t{i}, int64_t{1}));
  for (int i = 0; i < 50; ++i) CHECK(*sums[i].get(60s) == i + 1);
  auto cpus_free = [&] {
    auto doc = c.status();
    int free = 0;
    for (auto& n : doc["nodes"])
      if (std::find(picks.begin(), picks.end(), n["node_id"].get<std::string>()) != picks.end())
        free += n["resources_available"].value("CPU", 0.0) == 1.0;
    return free == static_cast<int>(picks.size());
  };
  CHECK(eventually(cpus_free, 20s));

  // kill -9 of the victim's process: its node is declared dead within the heartbeat timeout and
  // a little more, and its actor restarts on another node (a new instance: its constructor's value).
  auto t0 = std::chrono::steady_clock::now();
  kill(c.victim_pid, SIGKILL);
  auto dead = [&] {
    auto doc = c.status();
    for (auto& n : doc["nodes"])
      if (n["node_id"] == victim) return !n["alive"].get<bool>() && n.value("state", "") == "DEAD";
    return false;
  };
  REQUIRE(eventually(dead, 20s));
  WARN("node declared dead " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                             << " s after kill -9 (heartbeat timeout " << kTimeout << " s)");
  CHECK(add_eventually(actors[on_victim], 1, 60s) == 1000 * on_victim + 1);
  st = c.status();
  for (auto& a : st["actors"])
    if (a["actor_id"] == actors[on_victim].id()) CHECK(a.value("node", "") != victim);

  // kill -9 of the head: the actors answer throughout (calls go to them directly); a head
  // started again at the same address takes the cluster over from Redis.
  kill(c.head_pid, SIGKILL);
  REQUIRE(eventually([&] { return yard::detail::process_dead(c.head_pid); }, 10s));
  for (int i = 0; i < kNodes; i += 17)  // the restarted one was added 1 since its restart
    CHECK(*actors[i].call(&SimulatedCounter::value).remote().get(30s) % 1000 == (i == on_victim ? 1 : 7));
  // Its Redis is held stopped while the new head looks for it (as a large cluster's can be busy,
  // rewriting its log): the new head waits for it and takes over, rather than starting a new
  // cluster beside it. Held for 2 s after the new head's process appears (a fault's length, not a
  // synchronisation: the takeover must happen whenever it answers).
  pid_t redis_pid = c.redis_pid();
  REQUIRE(redis_pid > 0);
  REQUIRE(kill(redis_pid, SIGSTOP) == 0);
  pid_t old_head = c.head_pid;
  std::thread resume([&] {
    auto new_head_started = [&] {
      for (pid_t p : yard::test::other_pids()) {
        if (p == old_head) continue;
        auto cmd = yard::test::proc_file(p, "cmdline");
        // "--head" as an argument of its own (the head's node manager has "--head-node")
        if (cmd.find(std::string("--head\0", 7)) != std::string::npos && cmd.find(c.home + "/head") != std::string::npos)
          return true;
      }
      return false;
    };
    eventually(new_head_started, 30s);
    std::this_thread::sleep_for(2s);
    kill(redis_pid, SIGCONT);
  });
  t0 = std::chrono::steady_clock::now();
  auto port = c.head_addr.substr(c.head_addr.rfind(':') + 1);
  std::string again;
  try {
    std::tie(c.head_pid, again) = c.start_head(port);
  } catch (...) {
    resume.join();
    throw;
  }
  resume.join();
  CHECK(again == c.head_addr);
  CHECK(yard::detail::read_token(c.home + "/head/token") == c.token);  // the same cluster
  WARN("head took over in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  st = c.status();
  int alive = 0;
  for (auto& n : st["nodes"]) alive += n["alive"].get<bool>();
  CHECK(alive == kNodes);  // every node but the victim, and the head's
  int alive_actors = 0;
  std::map<std::string, int> states;
  for (auto& a : st["actors"]) {
    alive_actors += a["state"] == "ALIVE";
    ++states[a["state"].get<std::string>() + " " + a["class"].get<std::string>()];
  }
  for (auto& [k, v] : states) UNSCOPED_INFO(k << ": " << v);  // what the takeover made of them
  CHECK(alive_actors == kNodes);
  // Placement works again: a new actor lands on a simulated node and answers.
  auto fresh = yard::actor<SimulatedCounter>(int64_t{5}).resources({{"sim", 1}}).remote();
  CHECK(*fresh.call(&SimulatedCounter::add).remote(int64_t{1}).get(60s) == 6);
  // `yard status` summarises a cluster this size (counted by the head, no row per node); with
  // --verbose every row is there.
  auto summary = sh(yard_bin() + " status --address " + c.head_addr + " --token " + c.token);
  INFO(summary.out);
  CHECK(summary.code == 0);
  CHECK_THAT(summary.out, Catch::Contains(std::to_string(kNodes) + " alive") && Catch::Contains("1 dead") &&
                              Catch::Contains(std::to_string(kNodes + 1) + " ALIVE") &&
                              Catch::Contains("yard status --verbose"));
  CHECK_THAT(summary.out, !Catch::Contains(victim));
  auto verbose = sh(yard_bin() + " status --verbose --address " + c.head_addr + " --token " + c.token);
  CHECK(verbose.code == 0);
  CHECK_THAT(verbose.out, Catch::Contains(victim) && Catch::Contains("DEAD") && Catch::Contains("SimulatedCounter"));
  // Full statuses asked for together (dashboards polling) are built away from the head's loop and
  // each answered whole, while an actor is placed and answers meanwhile.
  std::vector<std::future<yard::test::ShellResult>> fulls;
  for (int i = 0; i < 4; ++i)
    fulls.push_back(std::async(std::launch::async, [&] {
      return sh(yard_bin() + " status --json --address " + c.head_addr + " --token " + c.token);
    }));
  auto during = yard::actor<SimulatedCounter>(int64_t{9}).resources({{"sim", 1}}).remote();
  CHECK(*during.call(&SimulatedCounter::add).remote(int64_t{1}).get(60s) == 10);
  for (auto& f : fulls) {
    auto r = f.get();
    INFO(r.out);
    REQUIRE(r.code == 0);
    auto doc = json::parse(r.out);
    CHECK(doc["nodes"].size() == kNodes + 1);
    CHECK(doc["actors"].size() >= kNodes + 1);
    CHECK(doc["cluster"].contains("redis"));
  }
  during.kill();
  for (auto& a : actors) a.kill();
  fresh.kill();
  yard::shutdown();
}

TEST_CASE("yard stop stops 500 simulated nodes the head has no link to yet", "[scale]") {
  // Nothing was asked of the nodes: the head's requests to stop open their links, and the head
  // waits for the answers before it stops (it once stopped first, and they were never sent).
  const int nodes = 500;
  SimCluster c(nodes);
  // (A node left running costs `yard stop` 15 s of waiting for it: bounded here.)
  auto stop = sh("timeout 60 " + yard_bin() + " stop --address " + c.head_addr + " --token " + c.token);
  INFO(stop.out);
  CHECK(stop.code == 0);
  CHECK_THAT(stop.out, Catch::Contains("and " + std::to_string(nodes) + " joined nodes"));
  CHECK(eventually([&] { return yard::detail::process_dead(c.sims_pid); }, 20s));
  CHECK(eventually([&] { return yard::detail::process_dead(c.victim_pid); }, 20s));
}
