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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "yard/errors.h"

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

// A write refused before it was sent: this process's lease on writing ran out (Redis::fence).
class Fenced : public Error {
 public:
  using Error::Error;
};

// Where a Redis is: one server ("host:port"), or the primary that a set of Sentinels names
// ("sentinel:HOST:PORT,HOST:PORT,.../NAME"; the Sentinels ask for the same password as the
// servers they watch).
struct RedisEndpoint {
  std::string host;
  int port = 0;
  std::vector<std::pair<std::string, int>> sentinels;  // empty: one server
  std::string primary_name;                            // the name the Sentinels monitor it by
  bool via_sentinel() const { return !sentinels.empty(); }
  // Throws yard::Error saying what is malformed.
  static RedisEndpoint parse(const std::string& address);
  std::string str() const;
};

class Redis {
 public:
  // Connects and authenticates. Throws ConnectionError naming the address and the reason.
  Redis(const std::string& host, int port, const std::string& password,
        std::chrono::milliseconds timeout);
  // To one server, or to the primary its Sentinels name: asked again whenever the connection
  // breaks or the server says it is no longer the primary (READONLY), waiting up to `failover`
  // for the Sentinels to name a new one.
  Redis(const RedisEndpoint& at, const std::string& password, std::chrono::milliseconds timeout,
        std::chrono::milliseconds failover = std::chrono::seconds(20));
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
  // The server connected to now ("host:port"; after a failover, the new primary's).
  const std::string& address() const { return address_; }
  // How many times the connection was re-established (a restarted Redis, a network blip, a
  // failover to another primary).
  uint64_t reconnects() const { return reconnects_; }
  // Whether this connection follows a primary through Sentinels (and its writes can be waited
  // on: wait_replicas).
  bool replicated() const { return endpoint_.via_sentinel(); }
  // WAIT: how many replicas have acknowledged this connection's writes so far, waiting up to
  // `timeout` for `replicas` of them. 0 when a write not yet waited on ran on a connection that
  // has been made again since (a failover): the new primary's replicas never saw it.
  long long wait_replicas(int replicas, std::chrono::milliseconds timeout);
  // On a replicated connection on which a command that may write (anything but a known read) ran
  // since the last wait_replicas, waits up to `timeout` for one
  // replica to have them; false when none did. True at once otherwise.
  bool acknowledged(std::chrono::milliseconds timeout) {
    return !replicated() || !unacknowledged_ || wait_replicas(1, timeout) >= 1;
  }
  // Where it connects: with Sentinels, those known now (named at the start and those they told of).
  const RedisEndpoint& endpoint() const { return endpoint_; }
  // Writes under a lease (the active head's): `may_write` is asked before each command that may
  // write is sent, after the connection is made (so a connection made once the lease ran out
  // writes nothing); while it says no, such commands throw Fenced. Every connection, this one
  // and those made again, is named `name` (CLIENT SETNAME), so that a later holder can close
  // the connections of the one before (close_named).
  void fence(std::function<bool()> may_write, std::string name);
  // While one lives, the fence lets writes through (the lease's own renewal).
  class Unfenced {
   public:
    explicit Unfenced(Redis& r) : r_(r), was_(std::exchange(r.unfenced_, true)) {}
    ~Unfenced() { r_.unfenced_ = was_; }
    Unfenced(const Unfenced&) = delete;

   private:
    Redis& r_;
    bool was_;
  };
  // Closes the server's connections whose name starts with `prefix`, except those named `keep`
  // and this one; how many.
  int close_named(const std::string& prefix, const std::string& keep);

 private:
  void ensure_connected();
  void find_primary();
  void finish_connect(const std::string& password);
  // An error reply that says the server is not (or no longer) a writable primary; true when the
  // connection should find the primary again.
  bool moved(const std::string& error);
  std::unique_ptr<RedisConn> c_;
  std::string address_;
  std::string password_;
  RedisEndpoint endpoint_;
  std::chrono::milliseconds timeout_{0}, failover_{0};
  bool stale_ = false;  // ask the Sentinels before the next command
  bool unacknowledged_ = false;
  uint64_t written_on_ = 0;  // reconnects_ when the oldest write not yet waited on ran
  void note_command(const std::string& name);
  // Throws Fenced when the fence holds and `name` may write.
  void check_fence(const std::string& name);
  void name_connection();
  uint64_t reconnects_ = 0;
  std::function<bool()> may_write_;
  std::string client_name_;
  bool unfenced_ = false;
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
