// bench/run scheduler: what exists of the multi-node scheduler so far — dead_node_detect, the
// seconds from kill -9 of a node to the head marking it dead (default heartbeat timeout).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "process.h"
#include "redis_client.h"
#include "session.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::string yard = argc > 1 ? argv[1] : "build/scheduler/yard";
  auto home = fs::temp_directory_path() / ("yard-sched-bench-" + std::to_string(getpid()));
  fs::create_directories(home);
  setenv("YARD_HOME", home.c_str(), 1);
  auto run = [&](const std::string& args) { return std::system((yard + " " + args + " > /dev/null 2>&1").c_str()); };
  if (run("start --head --port 0") != 0) return 1;
  auto head = *yard::detail::latest_record();
  double worst = 0, sum = 0;
  const int trials = 3;
  for (int i = 0; i < trials; ++i) {
    auto before = fs::directory_iterator(home / "clusters");
    std::set<std::string> known;
    for (auto& e : before) known.insert(e.path().string());
    if (run("start --address " + head.address + " --num-cpus 1") != 0) return 1;
    std::optional<yard::detail::ClusterRecord> node;
    for (auto& e : fs::directory_iterator(home / "clusters"))
      if (!known.count(e.path().string())) node = yard::detail::read_record_file(e.path().string());
    if (!node) return 1;
    // The node's id, from the control store.
    FILE* p = popen((yard + " status --json").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    auto st = nlohmann::json::parse(out);
    std::string id;
    for (auto& x : st["nodes"])
      if (x["address"] == node->address) id = x["node_id"];
    auto [rh, rp] = yard::detail::split_address(st["cluster"]["redis"].get<std::string>());
    yard::detail::Redis redis(rh, rp, yard::detail::read_token(head.token_file), std::chrono::seconds(2));
    auto t0 = std::chrono::steady_clock::now();
    kill(node->pid, SIGKILL);
    double secs = -1;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      if (redis.cmd({"HGET", "yard:node:" + id, "state"}).str() == "DEAD") {
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (secs < 0) return 1;
    worst = std::max(worst, secs);
    sum += secs;
  }
  run("stop");
  fs::remove_all(home);
  std::printf("{\"suite\":\"scheduler\",\"case\":\"dead_node_detect\",\"value\":%.3f,\"unit\":\"s\"}\n", worst);
  std::printf("{\"suite\":\"scheduler\",\"case\":\"dead_node_detect_mean\",\"value\":%.3f,\"unit\":\"s\"}\n", sum / trials);
  return 0;
}
