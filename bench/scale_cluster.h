// The scale bench's cluster: a real head and its Redis started for one cluster size, and
// simulator processes of kPerSimProcess nodes each joined to it; `yard status` run as a user runs
// it, and the CPU each process spent. Stopped (Redis too) when it goes.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "proc_stats.h"
#include "yard/process.h"

namespace yard::bench::scale {

constexpr int kPerSimProcess = 500;  // simulated nodes per simulator process

inline double secs_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
inline int quiet_port() {
  for (int p = 20000 + getpid() % 5000;; ++p) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(p));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (ok) return p;
  }
}

struct Cluster {
  std::string yard_bin, home, head, token;
  pid_t head_pid = 0;
  std::vector<pid_t> sims;
  int nodes = 0;

  Cluster(std::string bin, int n) : yard_bin(std::move(bin)), nodes(n) {
    home = (fs::temp_directory_path() / ("yard-scale-bench-" + std::to_string(getpid()) + "-" + std::to_string(n))).string();
    fs::create_directories(home);
    setenv("YARD_HOME", home.c_str(), 1);
    // Below the ephemeral range: while the killed head's port is closed, a client reconnecting
    // to it from an ephemeral port could otherwise end up connected to itself on that port.
    std::tie(head_pid, head) = start_head(std::to_string(quiet_port()));
    std::ifstream(home + "/head/token") >> token;
    for (int done = 0, i = 0; done < n; done += kPerSimProcess, ++i)
      sims.push_back(simulate(std::min(kPerSimProcess, n - done), "sim" + std::to_string(i)).first);
    setenv("YARD_ADDRESS", head.c_str(), 1);
    setenv("YARD_TOKEN", token.c_str(), 1);
  }
  std::pair<pid_t, std::string> start_head(const std::string& port) {
    return start_daemon({yard_bin, "start", "--head", "--block", "--port", port, "--num-cpus", "1", "--session-dir",
                         home + "/head"});
  }
  std::pair<pid_t, std::string> simulate(int n, const std::string& dir) {
    return start_daemon({yard_bin, "start", "--address", head, "--token", token, "--block", "--simulate",
                         std::to_string(n), "--num-cpus", "4", "--resources", R"({"sim": 100000})", "--session-dir",
                         home + "/" + dir});
  }
  // `yard status ARGS` as a user runs it: its output and how long it took.
  std::string run_status(const std::string& args, double* ms) {
    auto t0 = Clock::now();
    std::string cmd = yard_bin + " status " + args + " --address " + head + " --token " + token + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[65536];
    size_t k;
    while (p && (k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
    if (p) pclose(p);
    if (ms) *ms = secs_since(t0) * 1000;
    return out;
  }
  pid_t redis_pid() const {
    pid_t pid = 0;
    std::string addr;
    std::ifstream(home + "/head/redis.address") >> addr >> pid;
    return pid;
  }
  // CPU seconds of this driver, the head, its Redis and the simulators.
  struct Cpu {
    double driver = 0, head = 0, redis = 0, sims = 0;
    double all() const { return driver + head + redis + sims; }
  };
  Cpu cpu() const {
    Cpu c{cpu_seconds(getpid()), cpu_seconds(head_pid), 0, 0};
    if (pid_t r = redis_pid(); r > 0) c.redis = cpu_seconds(r);
    for (auto p : sims) c.sims += cpu_seconds(p);
    return c;
  }
  double cpu_all() const { return cpu().all(); }
  nlohmann::json status(double* ms = nullptr) { return nlohmann::json::parse(run_status("--json", ms), nullptr, false); }
  ~Cluster() {
    for (auto p : sims) ::kill(p, SIGTERM);
    if (head_pid) ::kill(head_pid, SIGTERM);
    for (auto p : sims) yard::sys::terminate(p, SIGTERM, 20s);
    if (head_pid) yard::sys::terminate(head_pid, SIGTERM, 20s);
    if (pid_t rpid = redis_pid(); rpid > 0 && !yard::sys::process_dead(rpid)) yard::sys::terminate(rpid, SIGTERM, 5s);
    std::error_code ec;
    if (getenv("SCALE_KEEP_HOME")) std::fprintf(stderr, "cluster logs kept in %s\n", home.c_str());
    else fs::remove_all(home, ec);
  }
};

}  // namespace yard::bench::scale
