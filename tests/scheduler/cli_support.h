// What the CLI tests share: the binaries under test, waiting on a condition, a head started for
// a test (stopped at its end, also when it fails), joining nodes, and killing what a test started.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "yard/internal/session.h"
#include "support.h"
#include "yard/process.h"

namespace yard::cli_test {

using namespace std::chrono_literals;
using yard::test::eventually;

inline std::string yard_bin() { return getenv("YARD_BIN"); }
inline std::string probe_bin() { return getenv("PROBE_BIN"); }

using Result = yard::test::ShellResult;
using yard::test::sh;

// A private YARD_HOME and a head started with `yard start --head`; stopped (or killed) at the end.
struct Cluster {
  std::string home, addr;
  int port = 0;
  int pid = 0;
  // `extra`: more arguments for `yard start --head`.
  explicit Cluster(bool start = true, const std::string& extra = "") {
    char tmpl[] = "/tmp/yard-cli-test-XXXXXX";
    home = mkdtemp(tmpl);
    setenv("YARD_HOME", home.c_str(), 1);
    unsetenv("YARD_ADDRESS");
    unsetenv("YARD_TOKEN");
    if (!start) return;
    port = yard::detail::free_port("127.0.0.1");
    auto r = sh(yard_bin() + " start --head --num-cpus 2 --port " + std::to_string(port) + " " + extra);
    INFO(r.out);
    REQUIRE(r.code == 0);
    addr = "127.0.0.1:" + std::to_string(port);
    auto rec = yard::detail::latest_record();
    REQUIRE(rec);
    pid = rec->pid;
  }
  ~Cluster() {
    if (pid > 0 && kill(pid, 0) == 0) {
      sh(yard_bin() + " stop --address " + addr);
      eventually([&] { return kill(pid, 0) != 0; }, 10s);
    }
    // Whatever `yard stop` did not end (the head's node manager and Redis outlive a killed head).
    yard::test::kill_processes_of(home);
    std::error_code ec;
    if (!getenv("YARD_TEST_KEEP_HOME")) std::filesystem::remove_all(home, ec);  // kept on request, to look into
  }
  std::string yard(const std::string& args) const { return yard_bin() + " " + args; }
  // Kills the head service (SIGKILL) and starts a head at its address, which takes the cluster
  // over; `extra`: more arguments for it. Returns the session's record.
  yard::detail::ClusterRecord take_over(const std::string& extra = "") {
    kill(pid, SIGKILL);
    REQUIRE(eventually([&] { return yard::detail::process_dead(pid); }, 10s));
    auto r = sh(yard("start --head --num-cpus 2 --port " + std::to_string(port) + " " + extra));
    INFO(r.out);
    REQUIRE(r.code == 0);
    auto rec = yard::detail::latest_record();
    REQUIRE(rec);
    pid = rec->pid;
    return *rec;
  }
};


// How often `what` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The file's whole text ("" when it cannot be read).
inline std::string file_text(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// `yard start --address HEAD ARGS`: the node's address and pid.
inline std::pair<std::string, int> join_node(const Cluster& c, const std::string& args) {
  auto r = sh(c.yard("start --address " + c.addr + " " + args));
  INFO(r.out);
  REQUIRE(r.code == 0);
  auto at = r.out.find("node started at ");
  REQUIRE(at != std::string::npos);
  std::string addr = r.out.substr(at + 16, r.out.find(',', at) - at - 16);
  auto nrec = yard::detail::record_for(addr);
  REQUIRE(nrec);
  return {addr, nrec->pid};
}

// Kills the processes a test started when the test ends, however it ends.
struct KillAtEnd {
  std::vector<int>& pids;
  ~KillAtEnd() {
    for (int p : pids) kill(p, SIGKILL);
  }
};

// `yard submit --no-wait ARGS`: the job's id.
inline std::string submit(const Cluster& c, const std::string& args) {
  auto r = sh(c.yard("submit --no-wait " + args));
  INFO(r.out);
  REQUIRE(r.code == 0);
  auto at = r.out.rfind("job-");
  REQUIRE(at != std::string::npos);
  return r.out.substr(at, r.out.find_first_of(" \n", at) - at);
}

// The job's row of `yard jobs --json` (null when missing or unreadable).
inline nlohmann::json job_row(const Cluster& c, const std::string& id) {
  auto r = sh(c.yard("jobs --json"));
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  if (!doc.is_array()) return nullptr;
  for (auto& row : doc)
    if (row.value("job_id", "") == id) return row;
  return nullptr;
}

inline bool has_status(const Cluster& c, const std::string& id, const std::string& status) {
  auto row = job_row(c, id);
  return row.is_object() && row.value("status", "") == status;
}

}  // namespace yard::cli_test
