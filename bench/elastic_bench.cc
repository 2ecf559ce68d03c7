// bench/run elastic: how fast the cluster grows for demand. A real head with the autoscaler (local
// provider) and its Redis; this binary is the driver and the workers' binary.
//
//  scale_up_s: from asking for an actor that needs a resource no running node has to its first
//    answer, the autoscaler starting the node (median of 3). Peer, in the same run: the same node
//    started by hand (`yard start --address HEAD`, the way to grow a cluster without an
//    autoscaler) and the same actor created on it, from the command to the first answer: what
//    starting a node costs at all. Target: <= 5 s.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <thread>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "yard/process.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

using yard::bench::start_daemon;

class Probe {
 public:
  Probe() = default;
  int answer() { return 42; }
};

double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


// Waits until no node's id starts with "auto-" in `yard status --json` (the autoscaler stopped it).
bool autoscaled_nodes_gone(const std::string& yard_bin, std::chrono::seconds deadline) {
  auto end = Clock::now() + deadline;
  while (Clock::now() < end) {
    FILE* p = popen((yard_bin + " status --json 2>/dev/null").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (p) pclose(p);
    auto j = nlohmann::json::parse(out, nullptr, false);
    bool any = false;
    if (!j.is_discarded())
      for (auto& n : j["nodes"])
        any = any || (n.value("node_id", "").rfind("auto-", 0) == 0 && n.value("alive", false));
    if (!j.is_discarded() && !any) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

}  // namespace

YARD_ACTOR(Probe, yard::ctor<>, &Probe::answer);

int main(int argc, char** argv) {
  if (getenv("YARD_WORKER")) yard::init(argc, argv);
  std::string yard_bin = argc > 1 ? argv[1] : "build/scheduler/yard";
  std::string home = (fs::temp_directory_path() / ("yard-elastic-bench-" + std::to_string(getpid()))).string();
  fs::create_directories(home);
  setenv("YARD_HOME", home.c_str(), 1);
  std::ofstream(home + "/cluster.toml") << "provider = \"local\"\nidle_timeout_s = 2\n"
                                           "[node_types.special]\ncpus = 1\nresources = { special = 1 }\nmax_nodes = 1\n";
  auto [head_pid, head] = start_daemon({yard_bin, "start", "--head", "--block", "--port", "0", "--num-cpus", "1",
                                        "--autoscaler", home + "/cluster.toml", "--session-dir", home + "/head"});
  std::string token;
  std::ifstream(home + "/head/token") >> token;
  setenv("YARD_ADDRESS", head.c_str(), 1);
  setenv("YARD_TOKEN", token.c_str(), 1);
  yard::init();

  std::vector<double> ours, by_hand;
  for (int rep = 0; rep < 3; ++rep) {
    // The peer: a node started by hand, then the actor on it.
    auto t0 = Clock::now();
    auto [node_pid, node_addr] = start_daemon({yard_bin, "start", "--address", head, "--token", token, "--block",
                                               "--num-cpus", "1", "--resources", R"({"by_hand": 1})"});
    auto h = yard::actor<Probe>().resources({{"by_hand", 1}}).remote();
    if (*h.call(&Probe::answer).remote().get(120s) != 42) return 1;
    by_hand.push_back(secs_since(t0));
    yard::kill(h);
    yard::sys::terminate(node_pid, SIGTERM, 15s);

    // Ours: the autoscaler sees the waiting actor and starts a node for it.
    t0 = Clock::now();
    auto a = yard::actor<Probe>().resources({{"special", 1}}).remote();
    if (*a.call(&Probe::answer).remote().get(120s) != 42) return 1;
    ours.push_back(secs_since(t0));
    yard::kill(a);
    if (!autoscaled_nodes_gone(yard_bin, 60s)) {
      std::fprintf(stderr, "elastic_bench: the idle node was not stopped within 60 s\n");
      return 1;
    }
  }
  double v = median(ours), p = median(by_hand);
  std::printf("{\"suite\":\"elastic\",\"case\":\"scale_up_s\",\"value\":%.3g,\"unit\":\"s\",\"peer\":"
              "\"node_started_by_hand\",\"peer_value\":%.3g,\"ratio\":%.3g,\"settings\":\"both nodes started by "
              "the same yard binary on this machine with 1 CPU; the same actor on each\"}\n",
              v, p, v / p);
  std::fflush(stdout);
  yard::shutdown();
  yard::sys::terminate(head_pid, SIGTERM, 15s);
  std::error_code ec;
  fs::remove_all(home, ec);
  return 0;
}
