// The control store's tables against a real redis-server: a node's heartbeat rewrites only the
// fields of its record that changed, and the whole record after a reconnection or a failed write;
// a store's format is stamped, migrated or refused.
#include <catch2/catch.hpp>

#include "store/format.h"
#include "store/replication.h"
#include "store/tables.h"
#include "yard/errors.h"
#include "yard/internal/redis.h"

using namespace yard::sched;
using namespace std::chrono_literals;

namespace {

store::NodeReport report(double now, long workers) {
  store::NodeReport r;
  r.address = "127.0.0.1:7000";
  r.hostname = "here";
  r.pid = 42;
  r.log_dir = "/tmp/logs";
  r.start_time = 1000;
  r.now = now;
  r.workers = workers;
  return r;
}

// The client's connections to the server, killed: the next command reconnects.
void drop_connections(yard::sys::Redis& admin) { admin.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}); }

}  // namespace

TEST_CASE("a heartbeat writes the changed fields of a node's record, and all of them when in doubt", "[tables]") {
  yard::sys::RedisServer server;
  yard::sys::Redis redis("127.0.0.1", server.port(), "", 5s), admin("127.0.0.1", server.port(), "", 5s);
  store::Tables tables(redis);
  const std::string key = "yard:node:n1";

  tables.nodes.report("n1", report(2000, 0), 4s);
  auto f = admin.hgetall(key);
  CHECK(f["address"] == "127.0.0.1:7000");
  CHECK(f["workers"] == "0");
  CHECK(f.count("pid"));
  CHECK(admin.cmd({"GET", "yard:node:n1:heartbeat"}).str() == std::to_string(2000.0));
  CHECK(admin.cmd({"PTTL", "yard:node:n1:heartbeat"}).integer() > 3000);

  // A field that did not change is not written again; one that did is.
  admin.cmd({"HDEL", key, "hostname"});
  tables.nodes.report("n1", report(2001, 3), 4s);
  f = admin.hgetall(key);
  CHECK(f.count("hostname") == 0);
  CHECK(f["workers"] == "3");
  CHECK(admin.cmd({"GET", "yard:node:n1:heartbeat"}).str() == std::to_string(2001.0));

  // At least every kFullReportEvery the whole record is written again.
  tables.nodes.report("n1", report(2001 + store::kFullReportEvery, 3), 4s);
  CHECK(admin.hgetall(key)["hostname"] == "here");

  // After a reconnection (a Redis that restarted may have lost everything), the whole record.
  admin.cmd({"HDEL", key, "hostname", "pid"});
  drop_connections(admin);
  tables.nodes.report("n1", report(2040, 3), 4s);  // seen closed before sending: made again first
  f = admin.hgetall(key);
  CHECK(f["hostname"] == "here");
  CHECK(f["pid"] == "42");

  // Many nodes in one round trip: the same rule, and whether each one's key existed before.
  admin.cmd({"HSET", "yard:res:n1:avail", "CPU", "1"});
  admin.cmd({"HDEL", key, "hostname"});
  auto present = tables.nodes.report_all({{"n1", report(2041, 4)}, {"n2", report(2041, 0)}}, 4s,
                                   [](const std::string& id) { return "yard:res:" + id + ":avail"; });
  REQUIRE(present.size() == 2);
  CHECK(present[0]);
  CHECK_FALSE(present[1]);
  CHECK(admin.hgetall(key).count("hostname") == 0);
  CHECK(admin.hgetall(key)["workers"] == "4");
  CHECK(admin.hgetall("yard:node:n2")["hostname"] == "here");
  CHECK_FALSE(admin.cmd({"GET", "yard:node:n2:heartbeat"}).is_nil());

  // Each node's last heartbeat, as status and the dashboard show it; none once it expired.
  auto beats = tables.nodes.last_heartbeats({"n1", "n2", "never"});
  REQUIRE(beats.size() == 3);
  CHECK(beats[0].value_or(0) == Approx(2041));
  CHECK(beats[1].value_or(0) == Approx(2041));
  CHECK_FALSE(beats[2].has_value());
}

TEST_CASE("gathered actor writes reach Redis in one round trip, before anything read or written next",
          "[tables]") {
  yard::sys::RedisServer server;
  yard::sys::Redis redis("127.0.0.1", server.port(), "", 300ms), admin("127.0.0.1", server.port(), "", 5s);
  store::Tables tables(redis);
  tables.link.gather_writes();
  store::ActorRecord a;
  a.id = "actor-1";
  a.class_name = "Counter";
  a.job = "job-1";
  tables.actors.add(a, "spec");
  a.state = store::ActorState::kAlive;
  a.address = "127.0.0.1:7001";
  tables.actors.save(a);
  // Gathered: nothing in Redis yet.
  CHECK(admin.cmd({"EXISTS", "yard:actor:actor-1"}).integer() == 0);
  CHECK(admin.cmd({"SISMEMBER", "yard:actors", "actor-1"}).integer() == 0);

  // Any other use of the tables sends them first: a read sees them.
  auto read = tables.actors.get("actor-1");
  REQUIRE(read);
  CHECK(read->state == store::ActorState::kAlive);
  CHECK(read->address == "127.0.0.1:7001");
  CHECK(admin.cmd({"SISMEMBER", "yard:actors", "actor-1"}).integer() == 1);
  CHECK(admin.cmd({"GET", "yard:actor:actor-1:spec"}).str() == "spec");

  // write_gathered sends them; a round trip that fails (here: no answer within the client's
  // timeout while the server holds writes back) keeps them for the next.
  a.state = store::ActorState::kDead;
  a.cause = "killed";
  tables.actors.save(a);
  admin.cmd({"CLIENT", "PAUSE", "1500", "WRITE"});
  bool written = false;
  int failed = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!written && std::chrono::steady_clock::now() < deadline) {
    try {
      tables.link.write_gathered();
      written = true;
    } catch (const yard::ConnectionError&) {
      ++failed;  // the commands wait for the next round trip
    }
  }
  CHECK(failed >= 1);
  CHECK(written);
  auto f = admin.hgetall("yard:actor:actor-1");
  CHECK(f["state"] == "DEAD");
  CHECK(f["death_cause"] == "killed");
}

TEST_CASE("the store's format: a new store is stamped, an older one migrated, a newer one refused", "[tables][format]") {
  using A = store::FormatCheck::Action;
  CHECK(store::check_format("", false).action == A::kFresh);
  CHECK(store::check_format(std::to_string(store::kStoreFormat), true).action == A::kCurrent);
  auto old = store::check_format("", true);  // records from before the store kept a format number
  CHECK(old.action == A::kMigrate);
  CHECK(old.from == 1);
  CHECK(store::check_format("1", true).from == 1);
  auto newer = store::check_format("99", true);
  CHECK(newer.action == A::kRefuse);
  CHECK_THAT(newer.message, Catch::Contains("written by a newer Switchyard (format 99; this head reads formats up to 2)"));
  CHECK(store::check_format("x9", true).action == A::kRefuse);
  CHECK(store::check_format("0", true).action == A::kRefuse);

  yard::sys::RedisServer server;
  yard::sys::Redis redis("127.0.0.1", server.port(), "", 5s);
  store::Tables tables(redis);
  // An empty store is stamped.
  CHECK(store::settle_format(tables.link, "here").empty());
  CHECK(redis.cmd({"HGET", "yard:cluster", "format"}).str() == "2");
  CHECK(store::settle_format(tables.link, "here").empty());
  // A format 1 store: jobs, and the rendezvous keys every job's groups shared, which go.
  redis.cmd({"FLUSHALL"});
  redis.cmd({"RPUSH", "yard:jobs", "job-1"});
  redis.cmd({"SET", "yard:coll:g:rank:0", "a"});
  redis.cmd({"SET", "yard:coll:g:rank:1", "b"});
  auto done = store::settle_format(tables.link, "127.0.0.1:1");
  CHECK_THAT(done, Catch::Contains("was in format 1 (written before it kept a format number): migrated to format 2"));
  CHECK(redis.cmd({"EXISTS", "yard:coll:g:rank:0", "yard:coll:g:rank:1"}).integer() == 0);
  CHECK(redis.cmd({"LLEN", "yard:jobs"}).integer() == 1);  // the records stay
  CHECK(redis.cmd({"HGET", "yard:cluster", "format"}).str() == "2");
  // A newer Switchyard's store is left as it is, with a message that says what to do.
  redis.cmd({"HSET", "yard:cluster", "format", "3"});
  CHECK_THROWS_WITH(store::settle_format(tables.link, "127.0.0.1:1"),
                    Catch::Contains("the control store at 127.0.0.1:1 cannot be used: it was written by a newer "
                                    "Switchyard (format 3; this head reads formats up to 2)"));
  CHECK(redis.cmd({"HGET", "yard:cluster", "format"}).str() == "3");
}

TEST_CASE("a replicated store's replicas are read from INFO replication", "[tables]") {
  std::string info =
      "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nmin_slaves_good_slaves:2\r\n"
      "slave0:ip=127.0.0.1,port=7001,state=online,offset=900,lag=0\r\n"
      "slave1:ip=10.0.0.2,port=7002,state=wait_bgsave,offset=0,lag=3\r\n"
      "master_failover_state:no-failover\r\nmaster_repl_offset:1000\r\n";
  auto r = store::parse_replicas(info);
  REQUIRE(r.size() == 2);
  CHECK(r[0]["address"] == "127.0.0.1:7001");
  CHECK(r[0]["state"] == "online");
  CHECK(r[0]["bytes_behind"] == 100);
  CHECK(r[1]["address"] == "10.0.0.2:7002");
  CHECK(r[1]["lag_s"] == 3);
  CHECK(r[1]["bytes_behind"] == 1000);
  CHECK(store::parse_replicas("role:master\r\nconnected_slaves:0\r\n").empty());
}
