#include "head/store_servers.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/service.h"
#include "yard/internal/messaging.h"
#include "yard/internal/session.h"
#include "yard/errors.h"
#include "yard/internal/tls_identity.h"
#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kStartWait = std::chrono::seconds(20);

// Settings every server of a replicated store shares: the password it asks for and gives its
// primary, an append-only log, and no writes without a replica that follows.
std::string replicated_conf(const std::string& password) {
  return "requirepass " + password + "\nmasterauth " + password +
         "\nappendonly yes\nappendfsync everysec\nsave \"\"\nmin-replicas-to-write 1\nmin-replicas-max-lag 10\n"
         "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n";
}

}  // namespace

StoreServers::~StoreServers() = default;

void StoreServers::start() {
  password_ = create_token(s_.session_dir + "/redis/password");
  start_primary();
  if (s_.replicas == 0) {
    write_pids();
    return;
  }
  for (int i = 1; i <= s_.replicas; ++i) {
    Server r{"replica-" + std::to_string(i), s_.session_dir + "/redis-replica-" + std::to_string(i)};
    start_replica(r, "127.0.0.1", servers_[0].port);
    servers_.push_back(r);
  }
  wait_in_sync();
  std::string list;
  for (int i = 1; i <= kSentinels; ++i) {
    Server t{"sentinel-" + std::to_string(i), s_.session_dir + "/sentinel-" + std::to_string(i)};
    start_sentinel(t);
    servers_.push_back(t);
    list += (i > 1 ? "," : "") + std::string("127.0.0.1:") + std::to_string(t.port);
  }
  address_ = "sentinel:" + list + "/" + kPrimaryName;
  wait_for_quorum();
  write_pids();
}

// The lone server (or the first primary): loopback, and the head's interface when it listens
// beyond this machine, then TLS only, with a certificate made here and handed to the cluster's
// processes with the password.
void StoreServers::start_primary() {
  Server p{"primary", s_.session_dir + "/redis", free_port("127.0.0.1")};
  bool tls = curve_for_host(s_.host);
  if (tls && s_.replicas > 0)
    throw Error("a replicated control store (--control-replicas) runs on a loopback cluster for now; start the head "
                "with --host 127.0.0.1, or point it at a replicated Redis with --redis-address sentinel:...");
  if (tls) tls_cert_ = sys::make_tls_identity(p.dir + "/tls.key", p.dir + "/tls.crt");
  std::string text = s_.replicas > 0 ? replicated_conf(password_) : "requirepass " + password_ + "\n";
  if (tls)
    text += "port 0\ntls-port " + std::to_string(p.port) + "\ntls-cert-file " + p.dir + "/tls.crt\ntls-key-file " +
            p.dir + "/tls.key\ntls-ca-cert-file " + p.dir + "/tls.crt\ntls-auth-clients no\ntls-protocols TLSv1.3\n";
  else
    text += "port " + std::to_string(p.port) + "\n";
  std::string bind = "127.0.0.1";
  if (s_.host == "0.0.0.0")
    bind = s_.host;
  else if (s_.host != "127.0.0.1" && s_.host != "localhost")
    bind += " " + s_.host;
  text += "bind " + bind + "\nappendonly yes\nsave \"\"\n";
  std::string sock = p.dir + "/redis.sock";
  if (sock.size() < 100 && s_.replicas == 0) {
    sock_ = sock;
    text += "unixsocket " + sock + "\nunixsocketperm 700\n";
  }
  if (tls) sys::trust_redis_tls("127.0.0.1:" + std::to_string(p.port), tls_cert_);
  spawn_server(p, text, false);
  bool wide = s_.host != "127.0.0.1" && s_.host != "localhost" && s_.host != "0.0.0.0";
  address_ = (wide ? s_.host : std::string("127.0.0.1")) + ":" + std::to_string(p.port);
  if (tls) sys::trust_redis_tls(address_, tls_cert_);
  servers_.push_back(p);
}

void StoreServers::start_replica(Server& r, const std::string& primary_host, int primary_port) {
  if (!r.port) r.port = free_port("127.0.0.1");
  spawn_server(r,
               replicated_conf(password_) + "port " + std::to_string(r.port) + "\nbind 127.0.0.1\nreplicaof " +
                   primary_host + " " + std::to_string(primary_port) + "\n",
               false);
}

// Quorum 2 of 3; a primary silent for 1.5 s is judged down, and a failover that has not finished in
// 6 s is tried again.
void StoreServers::start_sentinel(Server& t) {
  t.port = free_port("127.0.0.1");
  std::string name = kPrimaryName;
  std::string text = "port " + std::to_string(t.port) + "\nbind 127.0.0.1\nrequirepass " + password_ +
                     "\nsentinel sentinel-pass " + password_ + "\nsentinel monitor " + name + " 127.0.0.1 " +
                     std::to_string(servers_[0].port) + " 2\nsentinel auth-pass " + name + " " + password_ +
                     "\nsentinel down-after-milliseconds " + name + " 1500\nsentinel failover-timeout " + name +
                     " 6000\nsentinel parallel-syncs " + name + " 1\n";
  spawn_server(t, text, true);
}

// Starts one server from a config file of mode 0600 in a directory only this user may enter (Redis
// rewrites the file: a Sentinel records what it learns, a replica its primary; "" keeps the file as
// it was) and waits until it answers.
void StoreServers::spawn_server(Server& s, const std::string& conf_text, bool sentinel) {
  fs::create_directories(s.dir);
  fs::permissions(s.dir, fs::perms::owner_all, fs::perm_options::replace);
  std::string conf = s.dir + "/" + (sentinel ? "sentinel" : "redis") + ".conf";
  if (!conf_text.empty()) write_private_file(conf, conf_text + "dir " + s.dir + "\ndaemonize no\nprotected-mode yes\n");
  SpawnOptions so;
  // A standalone head's servers outlive the head (a restarted head takes the cluster over);
  // `yard stop` stops them. An embedded cluster's die with its program.
  so.death_signal = s_.embedded ? SIGTERM : 0;
  so.new_process_group = !s_.embedded;
  so.stdout_path = s_.log_dir + "/" + (s.role == "primary" ? std::string("redis") : "redis-" + s.role) + ".log";
  std::vector<std::string> argv{which("redis-server"), conf};
  if (sentinel) argv.push_back("--sentinel");
  s.pid = spawn(argv, so);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    try {
      if (s.role == "primary" && !sock_.empty())
        Redis(sock_, password_, std::chrono::milliseconds(500));
      else
        Redis("127.0.0.1", s.port, password_, std::chrono::milliseconds(500));
      return;
    } catch (const Error& e) {
      if (Clock::now() > deadline || !pid_alive(s.pid))
        throw ConnectionError("redis-server (" + s.role + ") did not start (see " + so.stdout_path + "): " + e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// Until every replica has acknowledged a write (online is not enough: a replica's stream of
// commands starts with its first acknowledgement).
void StoreServers::wait_in_sync() const {
  Redis p("127.0.0.1", servers_[0].port, password_, std::chrono::seconds(2));
  auto deadline = Clock::now() + kStartWait;
  long long acked = 0;
  for (;;) {
    try {
      p.cmd({"SET", "yard:store:started", std::to_string(unix_time())});
      acked = p.wait_replicas(s_.replicas, std::chrono::milliseconds(200));
      if (acked >= s_.replicas) return;
    } catch (const Error&) {
      // NOREPLICAS until a replica follows
    }
    if (Clock::now() > deadline)
      throw ConnectionError("the control store's replicas did not follow its primary within 20 s (" +
                            std::to_string(acked) + " of " + std::to_string(s_.replicas) + "; see " + s_.log_dir +
                            "/redis-replica-*.log)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Until every Sentinel knows the others and the replicas, and says a failover can be authorised.
void StoreServers::wait_for_quorum() const {
  auto deadline = Clock::now() + kStartWait;
  std::string last;
  for (auto& t : servers_) {
    if (t.role.rfind("sentinel", 0) != 0) continue;
    Redis c("127.0.0.1", t.port, password_, std::chrono::seconds(2));
    for (;;) {
      try {
        last = c.cmd({"SENTINEL", "CKQUORUM", kPrimaryName}).str();
        if (c.cmd({"SENTINEL", "REPLICAS", kPrimaryName}).size() >= static_cast<size_t>(s_.replicas) &&
            c.cmd({"SENTINEL", "SENTINELS", kPrimaryName}).size() >= kSentinels - 1)
          break;
      } catch (const Error& e) {
        last = e.what();
      }
      if (Clock::now() > deadline)
        throw ConnectionError("the control store's Sentinels did not agree within 20 s (" + last + "; see " + s_.log_dir +
                              "/redis-sentinel-*.log)");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// Where the store is (with the first primary's pid) and every server's pid, for `yard stop` after a
// head that was killed and for a head that takes over.
void StoreServers::write_pids() const {
  std::ofstream(s_.session_dir + "/redis.address") << address_ << " " << servers_[0].pid << "\n";
  std::ofstream f(s_.session_dir + "/redis.pids");
  for (auto& s : servers_) f << s.pid << " " << s.role << "\n";
}

std::vector<std::pair<pid_t, std::string>> StoreServers::recorded(const std::string& session_dir) {
  std::vector<std::pair<pid_t, std::string>> out;
  std::ifstream f(session_dir + "/redis.pids");
  long pid = 0;
  std::string role;
  while (f >> pid >> role) out.emplace_back(static_cast<pid_t>(pid), role);
  return out;
}

// A server's directory under the session, by its role, and the port its config file names.
namespace {
std::string dir_of(const std::string& session_dir, const std::string& role) {
  if (role == "primary") return session_dir + "/redis";
  if (role.rfind("replica-", 0) == 0) return session_dir + "/redis-" + role;
  return session_dir + "/" + role;
}
int port_in(const std::string& dir) {
  for (auto name : {"/redis.conf", "/sentinel.conf"}) {
    std::ifstream f(dir + name);
    std::string key;
    int port = 0;
    while (f >> key)
      if (key == "port" && f >> port) return port;
  }
  return 0;
}
}  // namespace

void StoreServers::adopt() {
  password_ = read_token(s_.session_dir + "/redis/password");
  std::ifstream(s_.session_dir + "/redis.address") >> address_;
  s_.replicas = 0;
  for (auto& [pid, role] : recorded(s_.session_dir)) {
    std::string dir = dir_of(s_.session_dir, role);
    servers_.push_back(Server{role, dir, port_in(dir), pid, false});
    s_.replicas += role.rfind("replica-", 0) == 0;
  }
}

void StoreServers::watch() {
  if (s_.replicas == 0 || Clock::now() < next_watch_) return;
  next_watch_ = Clock::now() + std::chrono::milliseconds(500);
  for (auto& s : servers_)
    if (!s.child && s.pid && !pid_alive(s.pid)) {
      spdlog::error("redis-server ({}, pid {}) is gone", s.role, s.pid);
      s.pid = 0;
      restart(s);
    }
}

std::unique_ptr<Redis> StoreServers::connect() const {
  if (!sock_.empty()) return std::make_unique<Redis>(sock_, password_, std::chrono::milliseconds(3000));
  return std::make_unique<Redis>(sys::RedisEndpoint::parse(address_), password_, std::chrono::seconds(3));
}

bool StoreServers::exited(pid_t pid, int status) {
  for (auto& s : servers_) {
    if (s.pid != pid || !s.child) continue;
    spdlog::error("redis-server ({}, pid {}) {}", s.role, pid, describe_exit(status));
    s.pid = 0;
    if (s_.replicas > 0) restart(s);
    return true;
  }
  return false;
}

// Back as a server of the replicated store: a Sentinel as it was, a Redis as a replica of whichever
// primary the Sentinels name now (a failover may have promoted another).
void StoreServers::restart(Server& s) {
  try {
    if (s.role.rfind("sentinel", 0) == 0) {
      spawn_server(s, "", true);
    } else {
      Redis primary(sys::RedisEndpoint::parse(address_), password_, std::chrono::seconds(2), std::chrono::seconds(10));
      auto [host, port] = split_address(primary.address());
      if (port == s.port) return;  // named primary again while it was gone: nothing to follow
      start_replica(s, host, port);
    }
    s.child = true;
    spdlog::warn("redis-server ({}) started again, pid {}", s.role, s.pid);
    write_pids();
  } catch (const std::exception& e) {
    spdlog::error("starting redis-server ({}) again: {}", s.role, e.what());
  }
}

void StoreServers::stop() {
  for (auto it = servers_.rbegin(); it != servers_.rend(); ++it)
    if (it->pid) terminate(it->pid, SIGTERM, std::chrono::seconds(5));
  for (auto& s : servers_) s.pid = 0;
}

}  // namespace yard::sched
