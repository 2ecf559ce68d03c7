// bench/run scheduler: the multi-node scheduler on a cluster of this machine (a head and two node
// managers on loopback ports, started by this program and tied to it).
//   placement_group_create_remove  single-bundle groups created, waited for and removed per second
//   schedule_p50 / schedule_p99    ms from asking for a group to its reservation, 4 clients at once
//   actor_create                   actors per second, from the create call to the first answer;
//                                  peer process_start: this binary started as many times at once,
//                                  each to its first answer (a line on a pipe)
//   dead_node_detect               s from kill -9 of a node manager to the head marking it dead
// This binary is also the workers' binary.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "yard/process.h"
#include "yard/node_state.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class Empty {
 public:
  Empty() = default;
  int ping() { return 1; }
};
YARD_ACTOR(Empty, yard::ctor<>, &Empty::ping);

std::pair<pid_t, std::string> start_daemon(std::vector<std::string> argv) {
  yard::sys::SpawnOptions so;
  so.death_signal = SIGTERM;  // if this process dies, the daemon still stops cleanly (and its Redis)
  so.env["YARD_PARENT_PID"] = std::to_string(getpid());
  auto [pid, line] = yard::sys::spawn_ready(argv, so, 20s);
  if (line.empty() || line.rfind("ERROR", 0) == 0) throw std::runtime_error("daemon did not start: " + line);
  return {pid, line.substr(0, line.find(' '))};
}

double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void emit(const char* name, double value, const char* unit, const char* peer = nullptr, double peer_value = 0) {
  if (peer)
    std::printf("{\"suite\":\"scheduler\",\"case\":\"%s\",\"value\":%.3f,\"unit\":\"%s\",\"peer\":\"%s\","
                "\"peer_value\":%.3f,\"ratio\":%.4g,\"settings\":\"the peer is this binary started as often at "
                "once on the same machine, each answering on a pipe: what starting the processes costs\"}\n",
                name, value, unit, peer, peer_value, value / peer_value);
  else
    std::printf("{\"suite\":\"scheduler\",\"case\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", name, value, unit);
  std::fflush(stdout);
}

// The limit for actor creation: `n` processes of this binary started at once, each answering
// with one line as soon as its main() runs. Processes per second.
double process_starts(int n) {
  auto t0 = Clock::now();
  std::vector<std::pair<pid_t, int>> kids;
  for (int i = 0; i < n; ++i) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      setenv("BENCH_ANSWER", "1", 1);
      execl(yard::sys::self_exe().c_str(), "scheduler_bench", nullptr);
      _exit(127);
    }
    close(fds[1]);
    kids.push_back({pid, fds[0]});
  }
  for (auto& [pid, fd] : kids) {
    char c;
    if (read(fd, &c, 1) != 1) return 0;
    close(fd);
  }
  double rate = n / secs_since(t0);
  for (auto& [pid, fd] : kids) waitpid(pid, nullptr, 0);
  return rate;
}


}  // namespace

namespace {

// A head and its nodes, each a `yard start --block` of its own, under a temporary YARD_HOME.
struct BenchCluster {
  std::string yard_bin;
  fs::path home;
  std::string head, token;
  std::vector<pid_t> pids;

  explicit BenchCluster(std::string bin)
      : yard_bin(std::move(bin)), home(fs::temp_directory_path() / ("yard-sched-bench-" + std::to_string(getpid()))) {
    fs::create_directories(home);
    setenv("YARD_HOME", home.c_str(), 1);
    auto [head_pid, addr] = start_daemon({yard_bin, "start", "--head", "--block", "--port", "0", "--num-cpus", "4",
                                          "--session-dir", (home / "head").string()});
    pids.push_back(head_pid);
    head = addr;
    std::ifstream((home / "head" / "token").string()) >> token;
  }
  std::pair<pid_t, std::string> add_node(const std::string& name, const std::string& timeout) {
    auto [pid, addr] = start_daemon({yard_bin, "start", "--address", head, "--token", token, "--block", "--port", "0",
                                     "--num-cpus", "4", "--heartbeat-timeout", timeout, "--session-dir",
                                     (home / name).string()});
    pids.push_back(pid);
    return {pid, addr};
  }
  // The head stops its Redis when asked to stop; a head that does not is killed, and its Redis
  // (which outlives a killed head, for a takeover) is stopped from its record.
  void stop() {
    for (auto p : pids) kill(p, SIGTERM);
    for (auto p : pids) yard::sys::terminate(p, SIGTERM, 10s);
    std::ifstream rec(home / "head" / "redis.address");
    std::string raddr;
    pid_t rpid = 0;
    if (rec >> raddr >> rpid && rpid > 0 && !yard::sys::process_dead(rpid)) yard::sys::terminate(rpid, SIGTERM, 5s);
    fs::remove_all(home);
  }
};

// With PGPROF set: where a group's round trip goes (create, wait, remove), printed.
void profile_groups() {
  double c = 0, w = 0, r = 0;
  for (int i = 0; i < 500; ++i) {
    auto a = Clock::now();
    auto g = yard::placement_group({{{"CPU", 1}}});
    auto b = Clock::now();
    g.wait(10s);
    auto d = Clock::now();
    g.remove();
    auto e = Clock::now();
    c += std::chrono::duration<double>(b - a).count();
    w += std::chrono::duration<double>(d - b).count();
    r += std::chrono::duration<double>(e - d).count();
  }
  std::printf("create %.1f us wait %.1f us remove %.1f us\n", c / 500 * 1e6, w / 500 * 1e6, r / 500 * 1e6);
}

// Groups per second, one client; false when a group was not placed.
bool group_rate_case() {
  for (int i = 0; i < 50; ++i) {  // warm-up
    auto g = yard::placement_group({{{"CPU", 1}}});
    g.wait(10s);
    g.remove();
  }
  int n = 0;
  auto t0 = Clock::now();
  while (secs_since(t0) < 2.0) {
    auto g = yard::placement_group({{{"CPU", 1}}});
    if (!g.wait(10s)) return false;
    g.remove();
    ++n;
  }
  emit("placement_group_create_remove", n / secs_since(t0), "groups/s");
  return true;
}

// Placement latency with four clients at once: create + wait, then remove.
void schedule_latency_case() {
  std::vector<double> lat;
  std::mutex mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      std::vector<double> mine;
      for (int i = 0; i < 500; ++i) {
        auto t0 = Clock::now();
        auto g = yard::placement_group({{{"CPU", 1}}}, yard::PlacementStrategy::kSpread);
        g.wait(10s);
        mine.push_back(secs_since(t0) * 1000);
        g.remove();
      }
      std::lock_guard<std::mutex> l(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  for (auto& t : ts) t.join();
  std::sort(lat.begin(), lat.end());
  emit("schedule_p50", lat[lat.size() / 2], "ms");
  emit("schedule_p99", lat[lat.size() * 99 / 100], "ms");
}

// Actors per second: created together, each answering once, spread over the three nodes.
void actor_create_case() {
  const int n = 24;
  auto t0 = Clock::now();
  std::vector<yard::ActorHandle<Empty>> as;
  for (int i = 0; i < n; ++i) as.push_back(yard::actor<Empty>().spread().remote());
  std::vector<yard::ObjectRef<int>> pings;
  for (auto& a : as) pings.push_back(a.call(&Empty::ping).remote());
  for (auto& p : pings) *p.get(60s);
  double rate = n / secs_since(t0);
  emit("actor_create", rate, "actors/s", "process_start", process_starts(n));
  for (auto& a : as) a.kill();
}

// Dead node detection at the default heartbeat timeout, the worst of three; false when a node
// was not found dead within 30 s.
bool dead_node_case(BenchCluster& c) {
  double worst = 0;
  for (int trial = 0; trial < 3; ++trial) {
    auto [pid, addr] = c.add_node("d" + std::to_string(trial), "4");
    std::string id;
    for (auto& n : yard::nodes())
      if (n.address == addr) id = n.id;
    auto t0 = Clock::now();
    kill(pid, SIGKILL);
    double secs = -1;
    while (secs_since(t0) < 30) {
      if (yard::node_state(id) == yard::NodeState::kDead) {
        secs = secs_since(t0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (secs < 0) return false;
    worst = std::max(worst, secs);
  }
  emit("dead_node_detect", worst, "s");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (getenv("BENCH_ANSWER")) {
    std::printf("up\n");
    return 0;
  }
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
  BenchCluster c(argc > 1 ? argv[1] : "build/scheduler/yard");
  c.add_node("n1", "4");
  c.add_node("n2", "4");
  setenv("YARD_ADDRESS", c.head.c_str(), 1);
  setenv("YARD_TOKEN", c.token.c_str(), 1);
  yard::init();
  if (!group_rate_case()) return 1;
  if (getenv("PGPROF")) {
    profile_groups();
    return 0;
  }
  schedule_latency_case();
  actor_create_case();
  if (!dead_node_case(c)) return 1;
  yard::shutdown();
  c.stop();
  return 0;
}
