#include "yard/internal/redis.h"

#include <signal.h>
#include <stdlib.h>

#include <charconv>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <hiredis/hiredis.h>

#include "redis_conn.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::sys {

namespace {
bool only_reads(const std::string& name);
}

RedisReply::~RedisReply() {
  if (r_) freeReplyObject(r_);
}
bool RedisReply::is_nil() const { return !r_ || r_->type == REDIS_REPLY_NIL; }
std::string RedisReply::str() const {
  if (!r_ || (r_->type != REDIS_REPLY_STRING && r_->type != REDIS_REPLY_STATUS)) return {};
  return std::string(r_->str, r_->len);
}
long long RedisReply::integer() const {
  if (!r_) return 0;
  if (r_->type == REDIS_REPLY_INTEGER) return r_->integer;
  if (r_->type == REDIS_REPLY_STRING) {
    long long v = 0;
    auto [end, ec] = std::from_chars(r_->str, r_->str + r_->len, v);
    if (ec != std::errc() || end != r_->str + r_->len)
      throw Error("Redis replied '" + std::string(r_->str, std::min<size_t>(r_->len, 40)) +
                  "' where an integer was expected");
    return v;
  }
  return 0;
}
std::string RedisReply::error() const {
  return r_ && r_->type == REDIS_REPLY_ERROR ? std::string(r_->str, r_->len) : std::string();
}
size_t RedisReply::size() const { return r_ && r_->type == REDIS_REPLY_ARRAY ? r_->elements : 0; }
namespace {
// A reply's text: string and status replies as they are, integers in decimal, anything else empty.
std::string reply_text(const redisReply* e) {
  if (!e) return {};
  if ((e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) && e->str) return std::string(e->str, e->len);
  if (e->type == REDIS_REPLY_INTEGER) return std::to_string(e->integer);
  return {};
}
}  // namespace

std::string RedisReply::at(size_t i) const { return i < size() ? reply_text(r_->element[i]) : std::string(); }
std::vector<std::string> RedisReply::strings() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < size(); ++i) out.push_back(at(i));
  return out;
}

std::vector<std::string> RedisReply::nested_strings(size_t i) const {
  std::vector<std::string> out;
  if (i >= size()) return out;
  auto* e = r_->element[i];
  if (e->type != REDIS_REPLY_ARRAY) return out;
  for (size_t k = 0; k < e->elements; ++k) out.push_back(reply_text(e->element[k]));
  return out;
}

namespace {
std::mutex tls_mu;
std::map<std::string, std::string>& tls_certs() {  // guarded by tls_mu
  static std::map<std::string, std::string> m;
  return m;
}
std::string tls_cert_for(const std::string& address) {
  std::lock_guard<std::mutex> l(tls_mu);
  auto it = tls_certs().find(address);
  return it == tls_certs().end() ? std::string() : it->second;
}
}  // namespace

void trust_redis_tls(const std::string& address, const std::string& cert_pem) {
  std::lock_guard<std::mutex> l(tls_mu);
  tls_certs()[address] = cert_pem;
}

Redis::Redis(const std::string& host, int port, const std::string& password,
             std::chrono::milliseconds timeout)
    : Redis(RedisEndpoint{host, port, {}, {}}, password, timeout) {}

Redis::Redis(const std::string& unix_path, const std::string& password, std::chrono::milliseconds timeout)
    : address_("unix:" + unix_path) {
  try {
    c_ = plain_conn(unix_path, -1, timeout);
  } catch (const ConnectionError& e) {
    throw ConnectionError("cannot reach Redis at " + address_ + ": " + e.what());
  }
  finish_connect(password);
}

Redis::Redis(const RedisEndpoint& at, const std::string& password, std::chrono::milliseconds timeout,
             std::chrono::milliseconds failover)
    : endpoint_(at), timeout_(timeout), failover_(failover) {
  if (!at.via_sentinel()) {
    address_ = at.str();
    try {
      std::string cert = tls_cert_for(address_);
      c_ = cert.empty() ? plain_conn(at.host, at.port, timeout) : tls_conn(at.host, at.port, cert, timeout);
    } catch (const ConnectionError& e) {
      throw ConnectionError("cannot reach Redis at " + address_ + ": " + e.what());
    }
    finish_connect(password);
    return;
  }
  password_ = password;
  find_primary();
}

// Authenticates and pings.
void Redis::finish_connect(const std::string& password) {
  password_ = password;
  if (!password.empty()) cmd({"AUTH", password});
  cmd({"PING"});
}

// Through the Sentinels: the primary now, authenticated (connect_primary checked its ROLE).
void Redis::find_primary() {
  auto [conn, address] = connect_primary(endpoint_, password_, timeout_, failover_);
  c_ = std::move(conn);
  address_ = std::move(address);
  stale_ = false;
}

bool Redis::moved(const std::string& error) {
  if (!replicated()) return false;
  for (const char* code : {"READONLY", "NOREPLICAS", "MASTERDOWN", "LOADING"})
    if (error.rfind(code, 0) == 0) return stale_ = true;
  return false;
}

// A connection that broke (Redis restarted, a network blip, a failover) or that the server
// closed while idle is made again before the next command, never by re-sending a command that
// may have run. One that follows Sentinels asks them where the primary is now.
void Redis::ensure_connected() {
  if (!stale_ && !c_->broken() && !c_->peer_closed()) return;
  if (replicated()) {
    find_primary();
    ++reconnects_;
    name_connection();
    return;
  }
  if (!c_->reconnect()) throw ConnectionError("Redis at " + address_ + " is unreachable: " + c_->error());
  ++reconnects_;
  if (!password_.empty()) {
    auto* r = c_->command({"AUTH", password_});
    if (!r) throw ConnectionError("Redis at " + address_ + ": connection lost during AUTH");
    bool bad = r->type == REDIS_REPLY_ERROR;
    freeReplyObject(r);
    if (bad) throw AuthError("Redis at " + address_ + " refused the password after reconnecting");
  }
  name_connection();
}

void Redis::name_connection() {
  if (client_name_.empty()) return;
  auto* r = c_->command({"CLIENT", "SETNAME", client_name_});
  if (!r) throw ConnectionError("Redis at " + address_ + ": connection lost naming it");
  freeReplyObject(r);
}

void Redis::fence(std::function<bool()> may_write, std::string name) {
  may_write_ = std::move(may_write);
  client_name_ = std::move(name);
  ensure_connected();
  name_connection();
}

int Redis::close_named(const std::string& prefix, const std::string& keep) {
  auto list = cmd({"CLIENT", "LIST", "TYPE", "normal"}).str();
  int closed = 0;
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find('\n', at);
    if (end == std::string::npos) end = list.size();
    std::string line = list.substr(at, end - at);
    at = end + 1;
    auto field = [&](const std::string& key) {
      size_t p = line.rfind(key + "=", 0) == 0 ? 0 : line.find(" " + key + "=");
      if (p == std::string::npos) return std::string();
      p = line.find('=', p) + 1;
      return line.substr(p, line.find(' ', p) - p);
    };
    std::string name = field("name");
    if (name.rfind(prefix, 0) != 0 || name == keep || (!client_name_.empty() && name == client_name_)) continue;
    auto killed = cmd({"CLIENT", "KILL", "ID", field("id")});
    closed += static_cast<int>(killed.integer());
  }
  return closed;
}

void Redis::check_fence(const std::string& name) {
  if (!may_write_ || unfenced_ || only_reads(name) || may_write_()) return;
  throw Fenced("a write (" + name + ") to Redis at " + address_ + " refused: this process's lease on the control store ran out");
}

Redis::~Redis() = default;

// A command that a server refused because it is not (or not yet, or no longer) a writable primary
// did not run: it is sent again to the primary the Sentinels name, until the failover's time is up.
RedisReply Redis::cmd(const std::vector<std::string>& args) {
  auto deadline = std::chrono::steady_clock::now() + failover_;
  for (;;) {
    ensure_connected();
    if (!args.empty()) check_fence(args[0]);
    bool was_unacknowledged = unacknowledged_;
    if (!args.empty()) note_command(args[0]);
    auto* r = c_->command(args);
    if (!r) throw ConnectionError("Redis at " + address_ + " (" + args[0] + "): " + c_->error());
    if (r->type != REDIS_REPLY_ERROR) return RedisReply(r);
    std::string e(r->str, r->len);
    freeReplyObject(r);
    if (!moved(e)) throw Error("Redis at " + address_ + " refused " + args[0] + ": " + e);
    unacknowledged_ = was_unacknowledged;  // refused: it did not run (sent again on the next connection)
    if (std::chrono::steady_clock::now() >= deadline)
      throw ConnectionError("Redis at " + address_ + " refused " + args[0] + " for " +
                            std::to_string(failover_.count() / 1000) + " s: " + e);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

long long Redis::wait_replicas(int replicas, std::chrono::milliseconds timeout) {
  bool pending = unacknowledged_;
  auto n = cmd({"WAIT", std::to_string(replicas), std::to_string(timeout.count())}).integer();
  // A WAIT sent on a connection made after the writes (the primary failed over in between)
  // counts the new primary's replicas, which never saw them.
  bool gone = pending && written_on_ != reconnects_;
  unacknowledged_ = false;
  return gone ? 0 : n;
}

namespace {
// Commands that only read (or only talk to the server): anything else may write.
bool only_reads(const std::string& name) {
  static const std::set<std::string, std::less<>> kReads{
      "AUTH",    "DBSIZE", "EXISTS", "GET",    "HEXISTS", "HGET",    "HGETALL", "HKEYS",     "HLEN",  "HMGET",
      "HSCAN",   "INFO",   "KEYS",   "LINDEX", "LLEN",    "LRANGE",  "MGET",    "PING",      "PTTL",  "ROLE",
      "SCAN",    "SCARD",  "SCRIPT", "SISMEMBER", "SMEMBERS", "SSCAN", "STRLEN", "TIME", "TTL",  "TYPE",
      "WAIT",    "XLEN",   "XRANGE", "XREAD",  "ZCARD",   "ZRANGE",  "ZRANGEBYSCORE", "ZSCORE", "ZREVRANGE", "CLIENT"};
  std::string upper(name);
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return kReads.count(upper) > 0;
}
}  // namespace

void Redis::note_command(const std::string& name) {
  if (replicated() && !unacknowledged_ && !only_reads(name)) {
    unacknowledged_ = true;
    written_on_ = reconnects_;
  }
}

// As cmd(): a pipeline whose writes were all refused by a server that is not a writable primary is
// sent again whole (its reads again too). One whose writes were refused in part (the primary
// gained a replica halfway through) is not: the caller hears of a lost connection.
std::vector<RedisReply> Redis::pipeline(const std::vector<std::vector<std::string>>& cmds) {
  auto deadline = std::chrono::steady_clock::now() + failover_;
  for (;;) {
    ensure_connected();
    for (auto& args : cmds)
      if (!args.empty()) check_fence(args[0]);
    bool was_unacknowledged = unacknowledged_;
    for (auto& args : cmds) {
      if (!args.empty()) note_command(args[0]);
      if (!c_->append(args)) throw ConnectionError("Redis at " + address_ + ": " + c_->error());
    }
    std::vector<RedisReply> out;
    for (size_t i = 0; i < cmds.size(); ++i) {
      auto* r = c_->reply();
      if (!r) throw ConnectionError("Redis at " + address_ + " (" + cmds[i][0] + " in a pipeline): " + c_->error());
      out.emplace_back(r);
    }
    std::string refused;
    for (auto& r : out)
      if (moved(r.error())) refused = r.error();
    if (refused.empty()) return out;
    bool wrote = false;
    for (size_t i = 0; i < out.size(); ++i)
      wrote |= !cmds[i].empty() && !only_reads(cmds[i][0]) && out[i].error().empty();
    if (wrote || std::chrono::steady_clock::now() >= deadline)
      throw ConnectionError("Redis at " + address_ + " refused a pipeline's writes: " + refused);
    unacknowledged_ = was_unacknowledged;  // none of its writes ran: sent again whole
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace yard::sys

namespace yard::sys {
std::map<std::string, std::string> Redis::hgetall(const std::string& key) {
  auto h = cmd({"HGETALL", key}).strings();
  std::map<std::string, std::string> out;
  for (size_t k = 0; k + 1 < h.size(); k += 2) out[h[k]] = h[k + 1];
  return out;
}
}  // namespace yard::sys

namespace yard::sys {

RedisServer::RedisServer() {
  char tmpl[] = "/tmp/yard-redis-XXXXXX";
  if (!mkdtemp(tmpl)) throw ConnectionError("cannot create a directory for redis-server under /tmp");
  dir_ = tmpl;
  port_ = free_port("127.0.0.1");
  SpawnOptions so;
  so.death_signal = SIGKILL;
  so.stdout_path = dir_ + "/redis.log";
  std::string exe = which("redis-server");
  if (exe == "redis-server") exe = "/usr/bin/redis-server";
  pid_ = spawn({exe, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir", dir_, "--save", "",
                "--appendonly", "no"},
               so);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      Redis r("127.0.0.1", port_, "", std::chrono::milliseconds(200));
      return;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  terminate(pid_, SIGKILL, std::chrono::seconds(1));
  throw ConnectionError("redis-server did not start within 10 s (see " + dir_ + "/redis.log)");
}

RedisServer::~RedisServer() {
  terminate(pid_, SIGTERM, std::chrono::seconds(5));
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace yard::sys
