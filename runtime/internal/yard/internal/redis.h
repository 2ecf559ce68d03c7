// A small synchronous Redis client over hiredis, and a redis-server of a program's own (what a
// RendezvousServer runs). Part of the internal header set (yard/internal/): programs reach the
// control store through the runtime's ControlClient (control_client.h), libraries through
// yard/job_store.h.
//
// A Redis reached across hosts speaks TLS: once the process knows the certificate of the Redis
// at an address (trust_redis_tls; the cluster's processes learn it with the control store's
// address, from the head), every connection to that address is TLS 1.3, verified against that
// certificate alone. Other addresses and Unix sockets are plain.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

struct redisReply;

namespace yard::sys {

class RedisReply {
 public:
  explicit RedisReply(redisReply* r) : r_(r) {}
  ~RedisReply();
  RedisReply(RedisReply&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  RedisReply(const RedisReply&) = delete;
  bool is_nil() const;
  std::string error() const;  // the error reply's text, empty for any other reply
  std::string str() const;
  long long integer() const;
  size_t size() const;  // array elements
  std::string at(size_t i) const;
  std::vector<std::string> strings() const;
  // Strings of the array at element i (e.g. SCAN's key list).
  std::vector<std::string> nested_strings(size_t i) const;

 private:
  redisReply* r_;
};

// From now on, connections to the Redis at "host:port" use TLS and accept only this certificate
// (PEM). Thread-safe.
void trust_redis_tls(const std::string& address, const std::string& cert_pem);

class RedisConn;

class Redis {
 public:
  // Connects and authenticates. Throws ConnectionError naming the address and the reason.
  Redis(const std::string& host, int port, const std::string& password,
        std::chrono::milliseconds timeout);
  // Through a Unix socket (a Redis on the same machine: fewer copies and wake-ups than TCP).
  Redis(const std::string& unix_path, const std::string& password, std::chrono::milliseconds timeout);
  ~Redis();
  Redis(const Redis&) = delete;
  // Runs one command given as separate arguments (binary safe). Throws yard::Error on a
  // connection or command error.
  RedisReply cmd(const std::vector<std::string>& args);
  // Sends all commands, then reads all replies: one round trip. Error replies are returned as
  // replies (RedisReply::error()); only a lost connection throws.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string>>& cmds);
  // HGETALL as a map (empty when the key does not exist).
  std::map<std::string, std::string> hgetall(const std::string& key);
  const std::string& address() const { return address_; }
  // How many times the connection was re-established (a restarted Redis, a network blip).
  uint64_t reconnects() const { return reconnects_; }

 private:
  void ensure_connected();
  void finish_connect(const std::string& password);
  std::unique_ptr<RedisConn> c_;
  std::string address_;
  std::string password_;
  uint64_t reconnects_ = 0;
};

// Starts redis-server (from PATH, else /usr/bin) on a free loopback port in a temporary directory,
// without persistence; stops it and removes the directory when destroyed. The server dies with
// the thread that started it. Throws ConnectionError when it does not come up within 10 s.
class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace yard::sys

namespace yard::detail {
using sys::Redis;
using sys::RedisReply;
}  // namespace yard::detail
