// Rendezvous stores (yard/job_store.h): the one in this process's memory and the one on a real
// redis-server behave alike, keep their keys apart by prefix (a prefix with glob characters
// included), wait with a deadline, and say where they are when they fail. The control client
// under the Redis one makes a lost connection again by itself.
#include <catch2/catch.hpp>

#include <thread>

#include "support.h"
#include "yard/errors.h"
#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"
#include "yard/job_store.h"

using namespace std::chrono_literals;

namespace {

// The same checks for every kind of store; `tag` keeps runs on one server apart.
void behaves_as_a_store(yard::Rendezvous& s, const std::string& tag) {
  const std::string a = tag + ":a", b = tag + ":b";
  CHECK_FALSE(s.get(a).has_value());
  s.set(a, std::string("one\0two", 7));  // binary safe
  CHECK(s.get(a) == std::string("one\0two", 7));
  CHECK(s.absent({a, b}) == std::vector<std::string>{b});
  CHECK(s.add(b, 5) == 5);
  CHECK(s.add(b, -2) == 3);
  CHECK(s.get(b) == "3");
  CHECK(s.absent({a, b}).empty());
  s.erase(a);
  CHECK_FALSE(s.get(a).has_value());

  // erase_prefix takes its prefix literally: "g*[1]:" is no glob that also matches "gx1:".
  s.set(tag + ":g*[1]:x", "1");
  s.set(tag + ":g*[1]:y", "2");
  s.set(tag + ":gx1:z", "3");
  s.set(tag + ":h", "4");
  s.erase_prefix(tag + ":g*[1]:");
  CHECK(s.absent({tag + ":g*[1]:x", tag + ":g*[1]:y", tag + ":gx1:z", tag + ":h"}) ==
        std::vector<std::string>{tag + ":g*[1]:x", tag + ":g*[1]:y"});

  // wait: returns at once when all are there, the missing ones at the deadline, and a key set by
  // another thread while it waits.
  CHECK(s.wait({tag + ":h"}, 1s).empty());
  auto t0 = std::chrono::steady_clock::now();
  CHECK(s.wait({tag + ":h", tag + ":never"}, 150ms) == std::vector<std::string>{tag + ":never"});
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    s.set(tag + ":late", "x");
  });
  CHECK(s.wait({tag + ":late"}, 10s).empty());
  late.join();
}

}  // namespace

TEST_CASE("a rendezvous store in memory keeps, counts, erases and waits", "[job_store]") {
  auto s = yard::local_rendezvous();
  behaves_as_a_store(*s, "mem");
  CHECK_THAT(s->where(), Catch::Contains("this process"));
  s->set("n", "not a number");
  CHECK_THROWS_WITH(s->add("n", 1), Catch::Contains("not an integer") && Catch::Contains("n"));
  // Every call makes a store of its own.
  CHECK_FALSE(yard::local_rendezvous()->get("mem:h").has_value());
}

TEST_CASE("a rendezvous store on a redis-server behaves the same and keeps values a day at most", "[job_store]") {
  auto& server = yard::test::shared_redis();
  auto s = yard::rendezvous_at(server.address());
  behaves_as_a_store(*s, "redis");
  yard::sys::Redis admin("127.0.0.1", server.port(), "", 2s);
  auto ttl = admin.cmd({"TTL", "redis:h"}).integer();
  CHECK(ttl > 0);
  CHECK(ttl <= 86400);
  s->add("redis:counted", 1);
  CHECK(admin.cmd({"TTL", "redis:counted"}).integer() > 0);
  CHECK_THAT(s->where(), Catch::Contains(server.address()));
}

TEST_CASE("a store whose connection was dropped makes it again, and one with no server says where", "[job_store]") {
  auto& server = yard::test::shared_redis();
  auto s = yard::rendezvous_at(server.address());
  s->set("drop:k", "v");
  yard::sys::Redis admin("127.0.0.1", server.port(), "", 2s);
  admin.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  CHECK(s->get("drop:k") == "v");

  auto nowhere = "127.0.0.1:" + std::to_string(yard::sys::free_port("127.0.0.1"));
  auto gone = yard::rendezvous_at(nowhere);
  CHECK_THROWS_AS(gone->get("k"), yard::ConnectionError);
  CHECK_THROWS_WITH(gone->set("k", "v"), Catch::Contains(nowhere) && Catch::Contains("set k"));
  CHECK_THROWS_AS(yard::rendezvous_at("no-port-here"), yard::Error);
}

TEST_CASE("a control client asks where its store is once, and again only after losing it", "[job_store]") {
  auto& server = yard::test::shared_redis();
  int asked = 0;
  yard::detail::ControlClient c([&] {
    ++asked;
    return yard::detail::ControlStoreAccess{server.address(), ""};
  });
  CHECK(c.address().empty());
  c.run([](yard::detail::Redis& r) { r.cmd({"SET", "cc:k", "1"}); });
  c.run([](yard::detail::Redis& r) { r.cmd({"GET", "cc:k"}); });
  CHECK(asked == 1);
  CHECK(c.address() == server.address());
  // A connection the store closed while it was idle is made again before anything is sent: the
  // command runs once.
  yard::sys::Redis admin("127.0.0.1", server.port(), "", 2s);
  admin.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  int runs = 0;
  auto v = c.run([&](yard::detail::Redis& r) {
    ++runs;
    return r.cmd({"GET", "cc:k"}).str();
  });
  CHECK(v == "1");
  CHECK(runs == 1);
  // A connection lost while a command waits for its answer: the command runs once more on a new
  // one.
  auto kill_when_blocked = [&] {
    return std::thread([&] {
      yard::sys::Redis watcher("127.0.0.1", server.port(), "", 2s);
      yard::test::eventually([&] { return watcher.cmd({"CLIENT", "LIST"}).str().find("cmd=blpop") != std::string::npos; }, 5s);
      watcher.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    });
  };
  runs = 0;
  auto killer = kill_when_blocked();
  c.run([&](yard::detail::Redis& r) {
    ++runs;
    r.cmd({"BLPOP", "cc:nothing", "0.5"});
  });
  killer.join();
  CHECK(runs == 2);  // the first run met the lost connection
  // Any other error reaches the caller as it is, without a second run.
  runs = 0;
  CHECK_THROWS_WITH(c.run([&](yard::detail::Redis& r) {
                      ++runs;
                      return r.cmd({"NOSUCHCOMMAND"});
                    }),
                    Catch::Contains("NOSUCHCOMMAND"));
  CHECK(runs == 1);
  // A command that must not run twice: after a connection lost under it, it fails once, and the
  // client connects again for the next.
  runs = 0;
  killer = kill_when_blocked();
  CHECK_THROWS_AS(c.run_once([&](yard::detail::Redis& r) {
                    ++runs;
                    return r.cmd({"BLPOP", "cc:nothing", "0.5"}).size();
                  }),
                  yard::ConnectionError);
  killer.join();
  CHECK(runs == 1);
  CHECK(c.run_once([](yard::detail::Redis& r) { return r.cmd({"INCR", "cc:n"}).integer(); }) >= 1);
}

TEST_CASE("the key schema builds every table's keys and escapes globs", "[job_store]") {
  using namespace yard::keys;
  CHECK(node("n1") == "yard:node:n1");
  CHECK(heartbeat("n1") == "yard:node:n1:heartbeat");
  CHECK(resources_free("n1") == "yard:res:n1:avail");
  CHECK(rendezvous_prefix("j7", "collective") == "yard:rdv:j7:collective:");
  CHECK(checkpoint("j7", "job-a") == "yard:ckpt:j7:job-a");
  // Two jobs' records never share a key.
  CHECK(rendezvous_prefix("j10", "c").rfind(rendezvous_prefix("j1", "c"), 0) == std::string::npos);
  CHECK(glob_literal("a*b?c[d]\\") == "a\\*b\\?c\\[d\\]\\\\");
  CHECK(kCheckpointTable.durability == Durability::kDurable);
  CHECK(kHeartbeatTable.durability == Durability::kRebuilt);
}
