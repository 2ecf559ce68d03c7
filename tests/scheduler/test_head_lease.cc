// The head's lease against a real redis-server: one head holds it at a time, each new holder
// raises the epoch, a head whose lease ran out writes nothing (its writes are refused before they
// are sent) and loses its connections to the next holder, and a lease that lapsed while no one
// took it is renewed at the same epoch.
#include <catch2/catch.hpp>

#include <thread>

#include "head/head_lease.h"
#include "store/tables.h"
#include "yard/internal/redis.h"

using namespace yard::sched;
using namespace std::chrono_literals;

namespace {

// Until `done` holds, or fails the test after `limit`.
template <class F>
void wait_until(F done, std::chrono::milliseconds limit, const char* what) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) FAIL("timed out waiting until " << what);
    std::this_thread::sleep_for(10ms);
  }
}

bool has_connection_named(yard::sys::Redis& admin, const std::string& name) {
  return admin.cmd({"CLIENT", "LIST"}).str().find(" name=" + name + " ") != std::string::npos;
}

}  // namespace

TEST_CASE("one head holds the lease; one whose lease ran out writes nothing and loses its connections", "[tables][lease]") {
  yard::sys::RedisServer server;
  yard::sys::Redis a_conn("127.0.0.1", server.port(), "", 5s), b_conn("127.0.0.1", server.port(), "", 5s),
      admin("127.0.0.1", server.port(), "", 5s);
  store::Tables tables(admin);
  LeaseTiming t;
  t.ttl = 600ms;
  t.renew_every = 100ms;
  HeadLease a(a_conn, "127.0.0.1:1", t), b(b_conn, "127.0.0.1:2", t);

  REQUIRE(a.acquire());
  CHECK(a.epoch() == 1);
  auto now = tables.heads.active();
  CHECK(now.address == "127.0.0.1:1");
  CHECK(now.epoch == 1);
  CHECK(now.leased);
  CHECK_FALSE(b.acquire());  // held by a
  a_conn.cmd({"SET", "k", "1"});
  CHECK(a.renew());
  CHECK(has_connection_named(admin, "yard-head-1"));

  // a stalls (no renewal): its own deadline passes before Redis lets the lease go.
  wait_until([&] { return !a.valid(); }, 2s, "a's lease runs out");
  CHECK_THROWS_AS(a_conn.cmd({"SET", "k", "2"}), yard::sys::Fenced);
  CHECK_THROWS_AS(a_conn.pipeline({{"GET", "k"}, {"DEL", "k"}}), yard::sys::Fenced);
  CHECK(a_conn.cmd({"GET", "k"}).str() == "1");  // reads go on

  wait_until([&] { return !tables.heads.active().leased; }, 2s, "the lease lapses in Redis");
  REQUIRE(b.acquire());
  CHECK(b.epoch() == 2);
  CHECK(tables.heads.active().address == "127.0.0.1:2");
  CHECK_FALSE(has_connection_named(admin, "yard-head-1"));  // closed by b
  CHECK(has_connection_named(admin, "yard-head-2"));
  CHECK_FALSE(a.renew());  // b holds it: a must stop
  CHECK_FALSE(a.valid());
  CHECK_THROWS_AS(a_conn.cmd({"SET", "k", "3"}), yard::sys::Fenced);
  CHECK(admin.cmd({"GET", "k"}).str() == "1");

  // b's lease lapses while no head takes it: b renews it at the same epoch.
  wait_until([&] { return !tables.heads.active().leased; }, 2s, "b's lease lapses");
  CHECK(b.renew());
  CHECK(b.valid());
  CHECK(tables.heads.active().epoch == 2);
  b_conn.cmd({"SET", "k", "4"});
  CHECK(admin.cmd({"GET", "k"}).str() == "4");

  // A head that knows b is gone (it restarts at b's address) takes the lease at once.
  yard::sys::Redis c_conn("127.0.0.1", server.port(), "", 5s);
  HeadLease c(c_conn, "127.0.0.1:2", t);
  CHECK_FALSE(c.acquire());
  REQUIRE(c.acquire(b.holder()));
  CHECK(c.epoch() == 3);
  CHECK_FALSE(b.renew());
}

TEST_CASE("standby heads announce themselves until they withdraw or fall silent", "[tables][lease]") {
  yard::sys::RedisServer server;
  yard::sys::Redis redis("127.0.0.1", server.port(), "", 5s);
  store::Tables tables(redis);
  CHECK(tables.heads.standbys().empty());
  tables.heads.announce_standby("127.0.0.1:7702", 5s);
  tables.heads.announce_standby("127.0.0.1:7703", 200ms);
  auto s = tables.heads.standbys();
  std::sort(s.begin(), s.end());
  CHECK(s == std::vector<std::string>{"127.0.0.1:7702", "127.0.0.1:7703"});
  tables.heads.withdraw_standby("127.0.0.1:7702");
  wait_until([&] { return tables.heads.standbys().empty(); }, 2s, "the silent standby's announcement expires");
}
