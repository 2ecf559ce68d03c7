// Standby heads, as a user meets them: `yard start --head --standby --address HEAD` waits beside
// the active head and takes the cluster over by itself when that head is killed or paused past
// its lease; nodes, running drivers, the CLI and new drivers (YARD_ADDRESS=A,B) follow, a paused head that comes
// back steps down without writing, and `yard stop` stops the standbys with the cluster.
#include <signal.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "yard/internal/session.h"

using namespace yard::cli_test;
using json = nlohmann::json;

namespace {

std::string counter_bin() { return getenv("COUNTER_BIN"); }

// A standby head beside `c`'s head: its address and pid.
std::pair<std::string, int> start_standby(const Cluster& c) {
  int port = yard::detail::free_port("127.0.0.1");
  auto r = sh(c.yard("start --head --standby --address " + c.addr + " --port " + std::to_string(port)));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("standby head started"));
  std::string addr = "127.0.0.1:" + std::to_string(port);
  auto rec = yard::detail::record_for(addr);
  int pid = 0;
  if (rec) pid = rec->pid;
  if (pid == 0) pid = std::stoi(sh("pgrep -f -- '--standby --address " + c.addr + "' | head -1").out);
  return {addr, pid};
}

// `yard status --json` through the list of heads; null when no head answers.
json status_via(const Cluster& c, const std::string& heads) {
  auto r = sh("YARD_ADDRESS=" + heads + " " + c.yard("status --json"));
  if (r.code != 0) return nullptr;
  return json::parse(r.out, nullptr, false);
}

// The epoch of the head that answers at `heads`, and its address (0, "" : none answers).
std::pair<uint64_t, std::string> active_head(const Cluster& c, const std::string& heads) {
  auto j = status_via(c, heads);
  if (!j.is_object()) return {0, ""};
  auto cl = j["cluster"];
  return {cl.value("head_epoch", uint64_t(0)), cl.value("address", "")};
}

}  // namespace

TEST_CASE("a standby head takes over a killed head's cluster; nodes, drivers and the CLI follow", "[cli][heads]") {
  setenv("YARD_HEAD_LEASE_MS", "2000", 1);
  Cluster c;
  auto [standby, standby_pid] = start_standby(c);
  auto [node, node_pid] = join_node(c, "--num-cpus 1");
  std::string heads = c.addr + "," + standby;
  auto before = status_via(c, heads);
  REQUIRE(before.is_object());
  CHECK(before["cluster"].value("head_epoch", 0) == 1);
  CHECK(before["cluster"]["standby_heads"] == json::array({standby}));
  auto st = sh("YARD_ADDRESS=" + heads + " " + c.yard("status"));
  CHECK_THAT(st.out, Catch::Contains("active at " + c.addr + ", epoch 1, standbys: " + standby));

  // A driver that runs across the takeover, started with the first head's address only.
  std::string out = c.home + "/churn.out", stop_file = c.home + "/churn.stop";
  auto bg = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " churn " + stop_file + " > " + out + " 2>&1 & echo $!");
  std::vector<int> pids{std::stoi(bg.out)};
  KillAtEnd cleanup{pids};
  auto rounds = [&] { return count_of(file_text(out), "round "); };
  REQUIRE(eventually([&] { return rounds() >= 3; }, 60s));

  kill(c.pid, SIGKILL);
  REQUIRE(eventually([&] { return active_head(c, heads) == std::make_pair(uint64_t(2), standby); }, 30s));
  // The running driver asks its node where the head went, and its rounds go on there.
  size_t at_takeover = rounds();
  CHECK(eventually([&] { return rounds() >= at_takeover + 5; }, 90s));
  std::ofstream(stop_file) << "stop\n";
  REQUIRE(eventually([&] { return file_text(out).find("done ") != std::string::npos; }, 90s));
  INFO(file_text(out));
  CHECK(eventually([&] { return yard::detail::process_dead(pids[0]); }, 10s));
  c.pid = standby_pid;
  std::string old_addr = c.addr;
  c.addr = heads;  // the fixture stops the cluster through the list
  // Every node follows the new head, and none was blamed for the change.
  auto after = status_via(c, heads);
  REQUIRE(after["nodes"].size() == 2);
  for (auto& n : after["nodes"]) CHECK(n.value("alive", false));
  auto node_rec = yard::detail::record_for(node);
  REQUIRE(node_rec);
  CHECK(eventually([&] { return file_text(node_rec->log_dir + "/node.log").find("the cluster's head is now at " + standby) != std::string::npos; }, 10s));
  // A new driver given both addresses finds the active head and runs.
  auto run = sh("YARD_ADDRESS=" + heads + " " + counter_bin());
  INFO(run.out);
  CHECK(run.code == 0);
  // `yard stop` through the list stops the new head, the nodes and the store.
  auto stop = sh(c.yard("stop --address " + heads));
  INFO(stop.out);
  CHECK(stop.code == 0);
  CHECK(eventually([&] { return yard::detail::process_dead(standby_pid) && yard::detail::process_dead(node_pid); }, 20s));
  CHECK(eventually([&] { return yard::test::processes_of(c.home).empty(); }, 20s));  // the store's servers too
  (void)old_addr;
}

TEST_CASE("a head paused past its lease steps down when it resumes, and writes nothing", "[cli][heads]") {
  setenv("YARD_HEAD_LEASE_MS", "2000", 1);
  Cluster c;
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto [standby, standby_pid] = start_standby(c);
  std::string heads = c.addr + "," + standby;
  int paused = c.pid;
  REQUIRE(kill(paused, SIGSTOP) == 0);
  REQUIRE(eventually([&] { return active_head(c, standby).first == 2; }, 30s));
  auto cluster_before = status_via(c, standby)["cluster"];
  REQUIRE(kill(paused, SIGCONT) == 0);
  // It finds its lease taken, and stops without touching the cluster.
  REQUIRE(eventually([&] { return yard::detail::process_dead(paused); }, 20s));
  std::string log = file_text(rec->log_dir + "/head.log");
  INFO(log);
  CHECK_THAT(log, Catch::Contains("lost its lease: the head at " + standby + " (epoch 2) leads the cluster now"));
  CHECK(log.find("stopping the head's node manager") == std::string::npos);
  auto after = status_via(c, heads);
  REQUIRE(after.is_object());
  CHECK(after["cluster"].value("address", "") == standby);
  CHECK(after["cluster"].value("session_dir", "") == cluster_before.value("session_dir", ""));
  CHECK(after["cluster"].value("head_epoch", 0) == 2);
  for (auto& n : after["nodes"]) CHECK(n.value("alive", false));  // its node stays, under the new head
  c.pid = standby_pid;
  c.addr = heads;
}

TEST_CASE("a standby stops with its cluster; a second head without --standby is refused", "[cli][heads]") {
  Cluster c;
  auto [standby, standby_pid] = start_standby(c);
  auto r = sh(c.yard("start --head --standby --port 0"));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--head --standby --address"));
  CHECK(sh(c.yard("stop --address " + c.addr)).code == 0);
  CHECK(eventually([&] { return yard::detail::process_dead(standby_pid); }, 20s));
}

TEST_CASE("a job queued before the head's machine is lost runs under the standby, from the control store's copy of its files", "[cli][heads]") {
  setenv("YARD_HEAD_LEASE_MS", "2000", 1);
  Cluster c;
  auto [standby, standby_pid] = start_standby(c);
  std::string heads = c.addr + "," + standby;
  std::string wd = c.home + "/wd";
  std::filesystem::create_directories(wd);
  std::ofstream(wd + "/data.txt") << "read from the uploaded directory\n";
  // Nothing in the cluster has 3 CPUs: the job waits in the queue, its directory uploaded.
  auto id = submit(c, "--working-dir " + wd + " --replicas 1 --replica CPU=3 -- sh -c 'cat data.txt'");
  REQUIRE(eventually([&] { return has_status(c, id, "QUEUED"); }, 20s));
  kill(c.pid, SIGKILL);
  c.pid = standby_pid;
  c.addr = heads;
  REQUIRE(eventually([&] { return active_head(c, heads).first == 2; }, 30s));
  // The lost machine's files are gone with it: no copy of any blob is left on disk.
  size_t removed = 0;
  for (auto& e : std::filesystem::directory_iterator(c.home))
    if (std::filesystem::is_directory(e.path() / "blobs")) removed += std::filesystem::remove_all(e.path() / "blobs");
  CHECK(removed > 0);
  join_node(c, "--num-cpus 3");
  CHECK(eventually([&] { return has_status(c, id, "SUCCEEDED"); }, 60s));
  auto logs = sh(c.yard("logs " + id));
  INFO(logs.out);
  CHECK_THAT(logs.out, Catch::Contains("read from the uploaded directory"));
}

TEST_CASE("heads given one --team-key issue the same team credentials; a bad key file is refused", "[cli][heads]") {
  char tmpl[] = "/tmp/yard-team-key-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::string key = tmpl;
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove_key{key};
  std::ofstream(key) << "short\n";
  {
    Cluster none(false);
    auto r = sh(none.yard("start --head --port 0 --team-key " + key));
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("a team key has at least 32"));
    auto missing = sh(none.yard("start --head --port 0 --team-key " + key + ".missing"));
    CHECK(missing.code == 2);
    CHECK_THAT(missing.out, Catch::Contains("cannot read the file"));
  }
  std::ofstream(key) << "0123456789abcdef0123456789abcdef0123456789abcdef\n";
  auto credential = [](const Cluster& c) { return sh(c.yard("team-credential research")).out; };
  std::string first, again, own;
  {
    Cluster a(true, "--team-key " + key);
    first = credential(a);
  }
  {
    Cluster b(true, "--team-key " + key);
    again = credential(b);
  }
  {
    Cluster c;
    own = credential(c);
  }
  CHECK(first.size() >= 64);
  CHECK(first == again);
  CHECK(first != own);
}

TEST_CASE("after takeovers by one standby after another, yard stop stops the store the first head started", "[cli][heads]") {
  setenv("YARD_HEAD_LEASE_MS", "2000", 1);
  Cluster c;
  std::string heads = c.addr;
  for (uint64_t epoch = 2; epoch <= 3; ++epoch) {
    auto [standby, standby_pid] = start_standby(c);
    heads += "," + standby;
    kill(c.pid, SIGKILL);
    c.pid = standby_pid;
    REQUIRE(eventually([&] { return active_head(c, heads) == std::make_pair(epoch, standby); }, 30s));
    c.addr = standby;
  }
  auto stop = sh(c.yard("stop --address " + heads));
  INFO(stop.out);
  CHECK(stop.code == 0);
  CHECK(eventually([&] { return yard::test::processes_of(c.home).empty(); }, 20s));  // Redis too
}
