// Test support: a real redis-server for tests that need a control store, and deadline waits.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "process.h"
#include "redis_client.h"
#include "wire.h"

namespace yard::test {

// Starts redis-server on a free loopback port in a temporary directory; stops it at the end.
class RedisServer {
 public:
  RedisServer() {
    char tmpl[] = "/tmp/yard-test-redis-XXXXXX";
    dir_ = mkdtemp(tmpl);
    port_ = detail::free_port("127.0.0.1");
    detail::SpawnOptions so;
    so.death_signal = SIGKILL;
    so.stdout_path = dir_ + "/redis.log";
    pid_ = detail::spawn({"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                          "--dir", dir_, "--save", "", "--appendonly", "no"},
                         so);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        detail::Redis r("127.0.0.1", port_, "", std::chrono::milliseconds(200));
        return;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    throw std::runtime_error("redis-server did not start");
  }
  ~RedisServer() {
    detail::terminate(pid_, SIGTERM, std::chrono::seconds(5));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

// The next single-frame reply on a DEALER, decoded; nullptr when none came before its timeout.
inline std::unique_ptr<detail::InMessage> recv_reply(zmq::socket_t& s) {
  zmq::message_t m;
  if (!s.recv(m)) return nullptr;
  detail::Frames f;
  f.push_back(std::move(m));
  return std::make_unique<detail::InMessage>(std::move(f));
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

// One server for a whole test binary. The first call must be on the main thread: the server dies
// with the thread that started it, and test threads come and go.
inline RedisServer& shared_redis() {
  static RedisServer r;
  return r;
}

}  // namespace yard::test
