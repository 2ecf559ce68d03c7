// The Redis processes a head starts for its cluster's control store: one primary, or (with
// replicas) a primary, its replicas and three Sentinels that watch it and promote a replica when it
// is lost. They run on the head's machine, each with its own directory under the session; all use
// one password of their own (not the cluster token), kept in a file of mode 0600 and in config
// files, never on a command line.
//
// Replicated, every server keeps an append-only log, and a primary accepts writes only while a
// replica follows it within 10 s (min-replicas-to-write 1): a primary cut off from its replicas
// refuses writes instead of taking ones a failover would lose. A server that dies while the head
// runs is started again as a replica of the primary the Sentinels name.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "yard/internal/redis.h"

namespace yard::sched {

class StoreServers {
 public:
  struct Settings {
    std::string session_dir;
    std::string log_dir;
    std::string host;       // the head's interface: Redis listens there too beyond loopback
    bool embedded = false;  // the servers die with the head (else they outlive it until `yard stop`)
    int replicas = 0;       // 0: one server, no Sentinels
  };
  static constexpr int kSentinels = 3;
  static constexpr const char* kPrimaryName = "yard";

  explicit StoreServers(Settings s) : s_(std::move(s)) {}
  StoreServers(const StoreServers&) = delete;
  ~StoreServers();

  // Starts them and waits until the primary answers and, replicated, its replicas are in sync and
  // the Sentinels agree they can fail it over. Throws ConnectionError naming the log to read.
  void start();
  // The address the cluster's processes use: "host:port", or "sentinel:...:/yard" when replicated.
  const std::string& address() const { return address_; }
  const std::string& password() const { return password_; }
  // The session directory whose redis.pids lists these servers.
  const std::string& session_dir() const { return s_.session_dir; }
  const std::string& tls_cert() const { return tls_cert_; }  // PEM, "" when plain
  // The head's own connection: the Unix socket of a lone server, the primary through the
  // Sentinels when replicated.
  std::unique_ptr<detail::Redis> connect() const;
  // The servers a killed head of this session left (its redis.pids): a head that takes the cluster
  // over watches them as it watches its own (watch), and stops them when it is stopped.
  void adopt();
  // Adopted servers are not this process's children: every half second, those gone are started
  // again. Cheap between checks.
  void watch();
  // The servers a session's redis.pids names: pid and role.
  static std::vector<std::pair<pid_t, std::string>> recorded(const std::string& session_dir);
  // A child that exited: true when it was one of these (logged; a replicated one is started again).
  bool exited(pid_t pid, int status);
  // SIGTERM to each, waiting for it.
  void stop();

 private:
  struct Server {
    std::string role;  // "primary", "replica-N", "sentinel-N"
    std::string dir;
    int port = 0;
    pid_t pid = 0;
    bool child = true;  // started by this process (else adopted)
  };
  void start_primary();
  void start_replica(Server& s, const std::string& primary_host, int primary_port);
  void start_sentinel(Server& s);
  void spawn_server(Server& s, const std::string& conf_text, bool sentinel);
  void restart(Server& s);
  void wait_in_sync() const;
  void wait_for_quorum() const;
  void write_pids() const;
  Settings s_;
  std::string password_, tls_cert_, address_;
  std::string sock_;  // the lone server's Unix socket ("" when its path is too long)
  std::vector<Server> servers_;  // [0] the first primary, then replicas, then Sentinels
  std::chrono::steady_clock::time_point next_watch_{};
};

}  // namespace yard::sched
