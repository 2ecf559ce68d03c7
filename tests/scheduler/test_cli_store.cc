// The control store under faults, as a user meets them: a replicated store (`yard start --head
// --control-replicas 2`: a primary, two replicas, three Sentinels) whose primary is killed while
// placement groups, actors and tasks are made; and a connection the store drops.
#include <signal.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "yard/internal/session.h"
#include "yard/internal/redis.h"

using namespace yard::cli_test;
using json = nlohmann::json;

namespace {

json status_json(const Cluster& c) {
  auto r = sh(c.yard("status --json"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  return json::parse(r.out);
}

// The pid of the server with this role in the session's redis.pids.
pid_t recorded_pid(const std::string& session_dir, const std::string& role) {
  std::ifstream f(session_dir + "/redis.pids");
  long pid = 0;
  std::string r;
  while (f >> pid >> r)
    if (r == role) return static_cast<pid_t>(pid);
  return 0;
}

// Every server of the session's store, as redis.pids names them now.
std::vector<pid_t> recorded_pids(const std::string& session_dir) {
  std::vector<pid_t> out;
  std::ifstream f(session_dir + "/redis.pids");
  long pid = 0;
  std::string role;
  while (f >> pid >> role) out.push_back(static_cast<pid_t>(pid));
  return out;
}

// Two replicas online, and Sentinels that can authorise a failover.
bool store_whole(const Cluster& c) {
  auto cs = status_json(c)["cluster"]["control_store"];  // a copy: the loop must not outlive it
  size_t online = 0;
  for (auto& r : cs["replicas"]) online += r.value("state", "") == "online";
  return online == 2 && cs.value("quorum", false);
}

// `yard stop` stops every server of the store, those started again included.
void stop_and_check_servers(const Cluster& c, const std::string& session_dir) {
  auto servers = recorded_pids(session_dir);
  CHECK(servers.size() == 6);
  CHECK(sh(c.yard("stop")).code == 0);
  for (pid_t p : servers) CHECK(eventually([&] { return yard::detail::process_dead(p); }, 10s));
}

}  // namespace

TEST_CASE("a replicated control store loses its primary under load: the cluster follows the failover", "[cli][store]") {
  Cluster c(true, "--control-replicas 2");
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto st = sh(c.yard("status"));
  INFO(st.out);
  CHECK_THAT(st.out, Catch::Contains("Control store: primary") && Catch::Contains("2 replicas") &&
                         Catch::Contains("3/3 Sentinels answering, failover possible"));
  auto before = status_json(c)["cluster"]["control_store"];
  std::string first_primary = before["primary"];

  // Placement groups, actors in them and tasks, round after round, and a job writing records to
  // the control store one after another, while the primary is killed.
  std::string out = c.home + "/churn.out", stop = c.home + "/churn.stop";
  std::string ledger = c.home + "/ledger.out", ledger_stop = c.home + "/ledger.stop";
  auto bg = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " churn " + stop + " > " + out + " 2>&1 & echo $!");
  auto lg = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " ledger " + ledger_stop + " > " + ledger +
               " 2>&1 & echo $!");
  std::vector<int> pids{std::stoi(bg.out), std::stoi(lg.out)};
  KillAtEnd cleanup{pids};
  REQUIRE(eventually([&] { return count_of(file_text(out), "round ") >= 3; }, 60s));
  pid_t primary = recorded_pid(rec->session_dir, "primary");
  REQUIRE(primary > 0);
  REQUIRE(kill(primary, SIGKILL) == 0);
  size_t at_kill = count_of(file_text(out), "round ");

  // A replica is promoted, the head and the node follow it, and the rounds go on.
  REQUIRE(eventually([&] { return status_json(c)["cluster"]["control_store"].value("primary", "") != first_primary; }, 30s));
  CHECK(eventually([&] { return count_of(file_text(out), "round ") >= at_kill + 10; }, 60s));
  std::ofstream(stop) << "stop\n";
  std::ofstream(ledger_stop) << "stop\n";
  REQUIRE(eventually([&] { return file_text(out).find("done ") != std::string::npos; }, 90s));
  // Every record the job was told was written is there after the failover.
  REQUIRE(eventually([&] { return file_text(ledger).find("wrote ") != std::string::npos; }, 60s));
  std::string written = file_text(ledger);
  INFO(written);
  // (A write whose acknowledgement the failover cut off is reported to the job as an error, not
  // counted as written: a few of those, and none missing.)
  int wrote = 0, errors = -1;
  size_t missing = 1;
  REQUIRE(std::sscanf(written.c_str(), "wrote %d missing %zu errors %d", &wrote, &missing, &errors) == 3);
  CHECK(missing == 0);
  CHECK(wrote > 0);
  CHECK(errors <= 3);
  std::string churn = file_text(out);
  INFO(churn);
  CHECK_THAT(churn, Catch::Contains("failed 0"));
  CHECK(count_of(churn, "failed ") == 1);  // the summary line only

  // No node was blamed for the store's failover; the killed server is back, as a replica.
  auto after = status_json(c);
  CHECK(after["nodes"][0]["alive"].get<bool>());
  std::string head_log = file_text(rec->log_dir + "/head.log");
  INFO(head_log);
  CHECK(head_log.find("marked dead") == std::string::npos);
  CHECK(eventually([&] { return store_whole(c); }, 30s));
  stop_and_check_servers(c, rec->session_dir);
}

TEST_CASE("a head that takes a replicated cluster over watches the store's servers as its own", "[cli][store]") {
  Cluster c(true, "--control-replicas 2");
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto now = c.take_over();
  CHECK(now.session_dir == rec->session_dir);  // taken over, not a new cluster
  auto cs = status_json(c)["cluster"]["control_store"];
  CHECK(cs["replicas"].size() == 2);

  // Kills the server with this role; true once the head has started it again.
  auto killed_and_back = [&](const std::string& role) {
    pid_t was = recorded_pid(rec->session_dir, role);
    REQUIRE(was > 0);
    REQUIRE(kill(was, SIGKILL) == 0);
    return eventually([&] {
      pid_t again = recorded_pid(rec->session_dir, role);
      return again > 0 && again != was && !yard::detail::process_dead(again);
    }, 30s);
  };
  // A replica killed under the new head is started again by it, and follows the primary.
  CHECK(killed_and_back("replica-1"));
  CHECK(eventually([&] { return store_whole(c); }, 30s));
  // A Sentinel too, from its own configuration (what it learned is kept).
  CHECK(killed_and_back("sentinel-2"));
  CHECK(eventually([&] {
    auto cs = status_json(c)["cluster"]["control_store"];
    size_t answering = 0;
    for (auto& t : cs["sentinels"]) answering += t.value("ok", false);
    return answering == 3 && store_whole(c);
  }, 30s));
  stop_and_check_servers(c, rec->session_dir);
}

TEST_CASE("a connection the control store drops is made again without losing or repeating a command", "[cli][store]") {
  yard::sys::RedisServer server;
  yard::sys::Redis client("127.0.0.1", server.port(), "", 2s), admin("127.0.0.1", server.port(), "", 2s);
  auto id = client.cmd({"CLIENT", "ID"}).integer();
  CHECK(admin.cmd({"CLIENT", "KILL", "ID", std::to_string(id)}).integer() == 1);
  // Seen closed before anything is sent: the increment runs once, on a new connection.
  CHECK(client.cmd({"INCR", "n"}).integer() == 1);
  CHECK(client.reconnects() == 1);
  CHECK(admin.cmd({"GET", "n"}).str() == "1");

  // A head whose every connection the store drops (CLIENT KILL) goes on serving.
  Cluster c;
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  yard::detail::Redis store(yard::sys::RedisEndpoint::parse(status_json(c)["cluster"]["redis"]),
                            yard::detail::read_token(rec->session_dir + "/redis/password"), 2s);
  CHECK(store.cmd({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).integer() >= 2);
  auto r = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " tasks 20 < /dev/null");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("sum 380"));
  CHECK(status_json(c)["nodes"][0]["alive"].get<bool>());
}

TEST_CASE("a control store address is parsed or refused with the reason", "[cli][store]") {
  auto one = yard::sys::RedisEndpoint::parse("10.0.0.1:6379");
  CHECK_FALSE(one.via_sentinel());
  CHECK(one.str() == "10.0.0.1:6379");
  auto three = yard::sys::RedisEndpoint::parse("sentinel:10.0.0.1:26379,10.0.0.2:26379,h3:26380/yard");
  REQUIRE(three.via_sentinel());
  CHECK(three.sentinels.size() == 3);
  CHECK(three.sentinels[2] == std::pair<std::string, int>{"h3", 26380});
  CHECK(three.primary_name == "yard");
  CHECK(three.str() == "sentinel:10.0.0.1:26379,10.0.0.2:26379,h3:26380/yard");
  CHECK_THROWS_WITH(yard::sys::RedisEndpoint::parse("sentinel:10.0.0.1:26379"), Catch::Contains("names no primary"));
  CHECK_THROWS_WITH(yard::sys::RedisEndpoint::parse("sentinel:10.0.0.1:x/yard"), Catch::Contains("malformed Sentinel"));
  CHECK_THROWS_WITH(yard::sys::RedisEndpoint::parse("sentinel:/yard"), Catch::Contains("names no Sentinel"));
  CHECK_THROWS(yard::sys::RedisEndpoint::parse("no-port"));
}
