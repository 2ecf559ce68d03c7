// Test support: a real redis-server for tests that need a control store, and deadline waits.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "yard/job_store.h"
#include "yard/process.h"
#include "yard/internal/redis.h"
#include "wire.h"

namespace yard::test {

using RedisServer = sys::RedisServer;

// The next single-frame reply on a DEALER, decoded; nullptr when none came before its timeout.
inline std::unique_ptr<detail::InMessage> recv_reply(zmq::socket_t& s) {
  zmq::message_t m;
  if (!s.recv(m)) return nullptr;
  detail::Frames f;
  f.push_back(std::move(m));
  return std::make_unique<detail::InMessage>(std::move(f));
}

// Polls `f` every 20 ms until it holds or `deadline` passes; a test waits on conditions, never
// on sleeps alone.
template <class F>
inline bool eventually(F f, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

// /proc/PID/NAME ("cmdline", "environ": NUL-separated), "" once the process is gone.
inline std::string proc_file(pid_t pid, const char* name) {
  std::string s;
  if (FILE* fp = std::fopen(("/proc/" + std::to_string(pid) + "/" + name).c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
    std::fclose(fp);
  }
  return s;
}

// Every process's pid but this one's.
inline std::vector<pid_t> other_pids() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    if (pid_t pid = std::atoi(it->path().filename().c_str()); pid > 0 && pid != getpid()) out.push_back(pid);
  return out;
}

// Every process (but this one) whose command line names `dir`, whose environment sets YARD_HOME to
// it, or whose working directory is under it: what a test's cluster runs (a head, its node
// manager, Redis, workers).
inline std::vector<pid_t> processes_of(const std::string& dir) {
  std::vector<pid_t> out;
  if (dir.empty()) return out;
  std::string home_var = "YARD_HOME=" + dir;
  home_var.push_back('\0');
  for (pid_t pid : other_pids()) {
    std::error_code ec;
    std::string cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec).string();
    if (proc_file(pid, "cmdline").find(dir) != std::string::npos ||
        (proc_file(pid, "environ") + '\0').find(home_var) != std::string::npos || cwd.rfind(dir, 0) == 0)
      out.push_back(pid);
  }
  return out;
}

// SIGKILLs what processes_of(dir) finds, when a test's cluster could not be stopped. The number
// killed.
inline int kill_processes_of(const std::string& dir) {
  int killed = 0;
  for (pid_t pid : processes_of(dir)) killed += kill(pid, SIGKILL) == 0;
  return killed;
}

// Runs a shell command line, capturing stdout and stderr together.
struct ShellResult {
  int code;
  std::string out;
};
inline ShellResult sh(const std::string& cmd) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return {127, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// Starts `yard start ... --block` (argv, with --ready-fd added by spawn_ready) tied to this
// process: if it dies, the daemon still stops cleanly. (pid, its ready line: "address token_file",
// "ERROR: ..." or "" when it never reported).
inline std::pair<pid_t, std::string> spawn_daemon(const std::vector<std::string>& argv,
                                                  std::chrono::seconds deadline = std::chrono::seconds(20)) {
  detail::SpawnOptions so;
  so.death_signal = SIGTERM;
  so.env["YARD_PARENT_PID"] = std::to_string(getpid());
  return detail::spawn_ready(argv, so, deadline);
}

// One server for a whole test binary. The first call must be on the main thread: the server dies
// with the thread that started it, and test threads come and go.
inline RedisServer& shared_redis() {
  static RedisServer r;
  return r;
}

// One rendezvous store in this process's memory for a whole test binary: ranks that are threads
// meet there (group names keep the tests apart).
inline std::shared_ptr<Rendezvous> shared_rendezvous() {
  static auto s = local_rendezvous();
  return s;
}

}  // namespace yard::test
