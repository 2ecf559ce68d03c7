// The autoscaler with the local provider on a real head: an actor that needs a resource no
// running node has gets a node started for it and answers; a burst of pending actors never takes
// a node type past its max_nodes (and status says why the rest wait); nodes idle past the timeout
// are drained and stopped; a bad configuration is refused at start. This binary is the driver and
// the workers' binary.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "yard/internal/session.h"
#include "support.h"
#include "yard/process.h"
#include "yard/yard.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using json = nlohmann::json;
using yard::test::eventually;
using yard::test::sh;

namespace {

class Probe {
 public:
  Probe() = default;
  std::string node() { return yard::node_id(); }
  int answer() { return 42; }
};

std::string yard_bin() { return getenv("YARD_BIN"); }

constexpr const char* kConfig = R"(
provider = "local"
idle_timeout_s = 3
launch_timeout_s = 60
[node_types.special]
cpus = 1
resources = { special = 2 }
max_nodes = 2
)";

struct Cluster {
  std::string home, addr, token;
  pid_t head_pid = 0;

  // host: the head's --host (a non-loopback address for nodes in network namespaces).
  explicit Cluster(const char* config = kConfig, const std::string& host = "127.0.0.1") {
    char tmpl[] = "/tmp/yard-autoscale-test-XXXXXX";
    home = mkdtemp(tmpl);
    setenv("YARD_HOME", home.c_str(), 1);
    std::ofstream(home + "/cluster.toml") << config;
    auto [pid, line] = yard::test::spawn_daemon({yard_bin(), "start", "--head", "--block", "--host", host, "--port", "0",
                                                 "--num-cpus", "1", "--heartbeat-timeout", "2", "--autoscaler",
                                                 home + "/cluster.toml", "--session-dir", home + "/head"},
                                                60s);
    head_pid = pid;
    INFO(line);
    REQUIRE(!line.empty());
    REQUIRE(line.rfind("ERROR", 0) != 0);
    addr = line.substr(0, line.find(' '));
    token = yard::detail::read_token(home + "/head/token");
    setenv("YARD_ADDRESS", addr.c_str(), 1);
    setenv("YARD_TOKEN", token.c_str(), 1);
  }
  json status() {
    auto r = sh(yard_bin() + " status --json --address " + addr + " --token " + token);
    INFO(r.out);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
  }
  // The autoscaled nodes alive now.
  std::set<std::string> auto_nodes() {
    std::set<std::string> out;
    auto st = status();
    for (auto& n : st["nodes"])
      if (n.value("node_id", "").rfind("auto-", 0) == 0 && n.value("alive", false)) out.insert(n.value("node_id", ""));
    return out;
  }
  ~Cluster() {
    std::vector<pid_t> nodes;
    try {
      auto st = status();
      for (auto& n : st["nodes"])
        if (n.contains("pid")) nodes.push_back(std::stoi(n["pid"].is_string() ? n["pid"].get<std::string>() : n["pid"].dump()));
    } catch (...) {
    }
    if (head_pid > 0) yard::detail::terminate(head_pid, SIGTERM, 15s);
    for (pid_t p : nodes)  // the autoscaler stops its nodes with the head; make sure
      if (p > 0 && !yard::detail::process_dead(p)) yard::detail::terminate(p, SIGTERM, 10s);
    std::error_code ec;
    if (!getenv("YARD_TEST_KEEP")) fs::remove_all(home, ec);
  }
};

}  // namespace

YARD_ACTOR(Probe, yard::ctor<>, &Probe::node, &Probe::answer);

namespace {
std::string task_node(int) { return yard::node_id(); }
}  // namespace
YARD_REMOTE(task_node);

void yard_test_worker_hook(int argc, char** argv) {
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
}

TEST_CASE("the autoscaler starts nodes for demand, within max_nodes, and stops them when idle", "[autoscaler]") {
  Cluster c;
  CHECK(c.auto_nodes().empty());
  yard::init();

  // No running node has "special": the actor waits for a node the autoscaler starts.
  auto t0 = std::chrono::steady_clock::now();
  auto first = yard::actor<Probe>().resources({{"special", 1}}).remote();
  CHECK(*first.call(&Probe::answer).remote().get(90s) == 42);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  UNSCOPED_INFO("first answer " << took << " s after the actor was asked for");
  auto where = *first.call(&Probe::node).remote().get(30s);
  CHECK(where.rfind("auto-special-", 0) == 0);

  // A burst: 100 more actors, 2 fit on each node and at most 2 nodes may run.
  std::vector<yard::ActorHandle<Probe>> burst;
  for (int i = 0; i < 100; ++i) burst.push_back(yard::actor<Probe>().resources({{"special", 1}}).remote());
  size_t most = 0;
  bool told = false;
  REQUIRE(eventually(
      [&] {
        auto st = c.status();
        most = std::max(most, c.auto_nodes().size());
        auto& a = st["cluster"]["autoscaler"];
        for (auto& u : a["unmet"]) told = told || u.value("why", "").find("max_nodes") != std::string::npos;
        return c.auto_nodes().size() == 2 && told;
      },
      90s));
  // Three more answer (2 slots on each of the 2 nodes, one taken by `first`); the rest wait, and
  // never beyond 2 nodes.
  std::vector<yard::ObjectRef<int>> calls;
  for (auto& b : burst) calls.push_back(b.call(&Probe::answer).remote());
  auto w = yard::wait(calls, calls.size(), 3s);
  for (auto& r : w.ready) CHECK(*r.get() == 42);
  CHECK(w.ready.size() == 3);
  most = std::max(most, c.auto_nodes().size());
  CHECK(most == 2);

  // `yard status` shows the autoscaler and why the rest wait.
  auto text = sh(yard_bin() + " status --address " + c.addr + " --token " + c.token);
  INFO(text.out);
  CHECK(text.out.find("Autoscaler (local provider") != std::string::npos);
  CHECK(text.out.find("special") != std::string::npos);
  CHECK(text.out.find("max_nodes") != std::string::npos);

  // Everything ends: the nodes go idle and are drained and stopped after 3 s.
  for (auto& b : burst) yard::kill(b);
  yard::kill(first);
  burst.clear();
  calls.clear();
  REQUIRE(eventually([&] { return c.auto_nodes().empty(); }, 60s));
  auto st = c.status();
  for (auto& n : st["cluster"]["autoscaler"]["nodes"]) CHECK(n.value("phase", "") != "UP");
  yard::shutdown();
}

// Run by autoscale_netns_test.sh (root): the head on YARD_TEST_HEAD_HOST, an address of this
// machine other than loopback.
TEST_CASE("the local provider can start each node in a network namespace of its own", "[.netns]") {
  const char* host = getenv("YARD_TEST_HEAD_HOST");
  REQUIRE(host);
  Cluster c(R"(
provider = "local"
idle_timeout_s = 3
[local]
network_namespaces = true
[node_types.special]
cpus = 1
resources = { special = 1 }
max_nodes = 2
)",
            host);
  yard::init();
  // Two actors that cannot share a node: two nodes, each in its own namespace, each answering.
  auto a = yard::actor<Probe>().resources({{"special", 1}}).remote();
  auto b = yard::actor<Probe>().resources({{"special", 1}}).remote();
  CHECK(*a.call(&Probe::answer).remote().get(90s) == 42);
  CHECK(*b.call(&Probe::answer).remote().get(90s) == 42);
  auto na = *a.call(&Probe::node).remote().get(30s), nb = *b.call(&Probe::node).remote().get(30s);
  CHECK(na != nb);
  auto st = c.status();
  std::set<std::string> addrs;
  for (auto& n : st["nodes"])
    if (n.value("node_id", "") == na || n.value("node_id", "") == nb) addrs.insert(n.value("address", ""));
  REQUIRE(addrs.size() == 2);
  for (auto& addr : addrs) {
    INFO(addr);
    CHECK(addr.rfind("10.213.", 0) == 0);  // the node's end of its veth pair
  }
  for (auto& id : {na, nb}) CHECK(fs::exists("/run/netns/yard-" + id));
  // Idle nodes are stopped, and their namespaces removed.
  yard::kill(a);
  yard::kill(b);
  REQUIRE(eventually([&] { return c.auto_nodes().empty(); }, 60s));
  REQUIRE(eventually([&] { return !fs::exists("/run/netns/yard-" + na) && !fs::exists("/run/netns/yard-" + nb); }, 30s));
  yard::shutdown();
}

TEST_CASE("tasks that need a node type's resource wait for the node the autoscaler starts", "[autoscaler]") {
  Cluster c;
  yard::init();
  std::vector<yard::ObjectRef<std::string>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(yard::task(task_node).resources({{"special", 1}}).remote(i));
  auto where = yard::get(refs, 90s);
  for (auto& w : where) CHECK(w->rfind("auto-special-", 0) == 0);
  // Done: the node goes idle and is stopped; a task no node type holds waits for a node that
  // could join, and fails at its infeasible_timeout.
  REQUIRE(eventually([&] { return c.auto_nodes().empty(); }, 60s));
  CHECK_THROWS_WITH(yard::task(task_node).resources({{"special", 5}}).infeasible_timeout(2s).remote(0).get(30s),
                    Catch::Contains("special: 5"));
  yard::shutdown();
}

TEST_CASE("a queued job whose replicas need a node type's resource waits for the node the autoscaler starts",
          "[autoscaler][queue]") {
  Cluster c;
  auto conn = " --address " + c.addr + " --token " + c.token;
  auto r = sh(yard_bin() + " submit --no-wait" + conn + " --replicas 2 --replica special=1 -- sh -c 'echo ran'");
  INFO(r.out);
  REQUIRE(r.code == 0);
  auto at = r.out.rfind("job-");
  std::string id = r.out.substr(at, r.out.find_first_of(" \n", at) - at);
  // It is not infeasible: a node the autoscaler can add holds it.
  CHECK(r.out.find("queued: node_starting: no running node could hold it; waiting for the autoscaler to add one") !=
        std::string::npos);
  auto status = [&] {
    auto jobs = json::parse(sh(yard_bin() + " jobs --json" + conn).out, nullptr, false);
    if (jobs.is_array())
      for (auto& j : jobs)
        if (j.value("job_id", "") == id) return j.value("status", "");
    return std::string();
  };
  // No running node has `special`: the job's two replicas are demand, and one node of the type
  // (special = 2) holds them.
  // (The node lives at least idle_timeout_s after the job: seen while polling.)
  std::set<std::string> seen;
  CHECK(eventually(
      [&] {
        auto up = c.auto_nodes();
        seen.insert(up.begin(), up.end());
        return status() == "SUCCEEDED";
      },
      120s));
  CHECK(seen.size() == 1);
}

TEST_CASE("a provider that cannot start nodes is retried with backoff and reported; the head keeps serving",
          "[autoscaler]") {
  setenv("SLURM_CONF", "/nonexistent/slurm.conf", 1);  // sbatch retries for a minute (or is missing)
  Cluster c(R"(
provider = "slurm"
launch_timeout_s = 2
[node_types.special]
cpus = 1
resources = { special = 1 }
max_nodes = 1
)");
  unsetenv("SLURM_CONF");
  yard::init();
  auto a = yard::actor<Probe>().resources({{"special", 1}}).remote();
  json row;
  REQUIRE(eventually(
      [&] {
        row = c.status()["cluster"]["autoscaler"]["node_types"][0];
        return row.value("failures", 0) >= 2;
      },
      30s));
  INFO(row.dump());
  CHECK((row.value("error", "").find("did not join within 2 s") != std::string::npos ||
         row.value("error", "").find("sbatch is not on PATH") != std::string::npos));
  CHECK(c.auto_nodes().empty());
  // Still serving, and still waiting for the node rather than failing the actor.
  auto text = sh(yard_bin() + " status --address " + c.addr + " --token " + c.token);
  INFO(text.out);
  CHECK(text.out.find("last failure") != std::string::npos);
  CHECK_THROWS_AS(a.call(&Probe::answer).remote().get(1s), yard::TimeoutError);
  yard::kill(a);
  yard::shutdown();
}

TEST_CASE("a bad autoscaler configuration is refused at start with the file, key and reason", "[autoscaler]") {
  char tmpl[] = "/tmp/yard-autoscale-bad-XXXXXX";
  std::string home = mkdtemp(tmpl);
  std::ofstream(home + "/bad.toml") << "[node_types.gpu]\ngpus = 1\nmin_nodes = 3\nmax_nodes = 1\n";
  auto r = sh("YARD_HOME=" + home + " " + yard_bin() + " start --head --port 0 --autoscaler " + home + "/bad.toml 2>&1");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find(home + "/bad.toml: node_types.gpu.min_nodes: min_nodes 3 is above max_nodes 1") != std::string::npos);
  std::error_code ec;
  fs::remove_all(home, ec);
}

// Run by slurm_test.sh, which starts a one-host Slurm cluster (munged, slurmctld, slurmd) and sets
// SLURM_CONF: a node is a batch job.
TEST_CASE("the Slurm provider starts a node as a batch job and stops it when idle", "[.slurm]") {
  REQUIRE(getenv("SLURM_CONF"));
  Cluster c(R"(
provider = "slurm"
idle_timeout_s = 3
launch_timeout_s = 60
[slurm]
time_limit = "10:00"
[node_types.special]
cpus = 1
resources = { special = 1 }
max_nodes = 1
)");
  yard::init();
  auto a = yard::actor<Probe>().resources({{"special", 1}}).remote();
  CHECK(*a.call(&Probe::answer).remote().get(120s) == 42);
  auto node = *a.call(&Probe::node).remote().get(30s);
  REQUIRE(node.rfind("auto-special-", 0) == 0);
  // The node is the Slurm job named after it.
  auto q = sh("squeue --noheader --name " + node + " --format %T");
  INFO(q.out);
  CHECK(q.out.find("RUNNING") != std::string::npos);

  yard::kill(a);
  REQUIRE(eventually([&] { return c.auto_nodes().empty(); }, 60s));
  CHECK(eventually([&] { return sh("squeue --noheader --name " + node).out.empty(); }, 30s));
  yard::shutdown();
}

// Slurm's warning before a node's batch job ends (sbatch --signal=B:USR1@notice_s) is a spot notice:
// the node drains by the deadline, and a node started in its place takes its actor.
TEST_CASE("Slurm's warning before a node's end drains it by the deadline; a replacement takes over", "[.slurm]") {
  REQUIRE(getenv("SLURM_CONF"));
  Cluster c(R"(
provider = "slurm"
idle_timeout_s = 60
launch_timeout_s = 60
[slurm]
time_limit = "10:00"
notice_s = 5
[node_types.special]
cpus = 1
resources = { special = 1 }
max_nodes = 1
)");
  yard::init();
  auto a = yard::actor<Probe>().resources({{"special", 1}}).max_restarts(1).remote();
  auto node = *a.call(&Probe::node).remote().get(120s);
  REQUIRE(node.rfind("auto-special-", 0) == 0);
  // The warning, as Slurm sends it notice_s before the job's time limit, sent now.
  auto sig = sh("scancel --batch --signal=USR1 --name " + node);
  INFO(sig.out);
  REQUIRE(sig.code == 0);
  // The node leaves by the deadline (its batch job ends); its actor restarts on the node started
  // in its place.
  CHECK(eventually([&] { return sh("squeue --noheader --name " + node).out.empty(); }, 60s));
  auto again = *a.call(&Probe::node).remote().get(120s);
  CHECK(again != node);
  CHECK(again.rfind("auto-special-", 0) == 0);
  // The batch job's output says why it drained.
  std::string out;
  for (auto& e : fs::recursive_directory_iterator(c.home))
    if (e.path().filename() == "autoscale-" + node + ".out") {
      std::ifstream in(e.path());
      out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  INFO(out);
  CHECK(out.find("Slurm ends this node in 5 s: draining it") != std::string::npos);
  yard::kill(a);
  yard::shutdown();
}
