// The CLI with nodes that join a head: membership and failure, objects between hosts, stopping
// the nodes with the cluster, and a node that outlives its cluster. Real processes throughout.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "yard/internal/redis.h"

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using namespace yard::cli_test;

TEST_CASE("nodes join a head; a silent node is declared dead and announced", "[cli][nodes]") {
  Cluster c;  // the head, heartbeat timeout as default
  auto rec = *yard::detail::latest_record();
  std::vector<int> node_pids;
  std::vector<std::string> node_addrs;
  for (int i = 0; i < 2; ++i) {
    auto [addr, pid] = join_node(c, "--num-cpus 1 --heartbeat-timeout 1.5");
    node_addrs.push_back(addr);
    node_pids.push_back(pid);
  }
  KillAtEnd reaper{node_pids};

  auto nodes = [&] { return json::parse(sh(c.yard("status --json")).out)["nodes"]; };
  auto alive = [&] {
    int n = 0;
    for (auto& x : nodes()) n += x["alive"].get<bool>();
    return n;
  };
  CHECK(nodes().size() == 3);
  CHECK(alive() == 3);
  double cpus = 0;
  for (auto& x : nodes()) cpus += x["resources_total"]["CPU"].get<double>();
  CHECK(cpus == 4.0);  // 2 on the head, 1 on each node

  // A wrong token cannot join.
  auto bad = sh("YARD_TOKEN=wrong " + c.yard("start --address " + c.addr));
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Catch::Contains("wrong cluster token"));

  // kill -9 of a node: the head marks it dead within its timeout and announces it.
  kill(node_pids[0], SIGKILL);
  auto marked = [&] {
    for (auto& x : nodes())
      if (!x["alive"].get<bool>() && x.value("state", "") == "DEAD") return true;
    return false;
  };
  CHECK(eventually(marked, 15s));
  CHECK(alive() == 2);
  auto status = json::parse(sh(c.yard("status --json")).out);
  auto [rh, rp] = yard::detail::split_address(status["cluster"]["redis"].get<std::string>());
  yard::detail::Redis redis(rh, rp, yard::detail::read_token(rec.session_dir + "/redis/password"), 2s);
  auto events = redis.cmd({"LRANGE", "yard:events:log", "0", "-1"}).strings();
  REQUIRE(events.size() == 1);
  CHECK_THAT(events[0], Catch::Contains("node_dead"));

  // A node stopped on purpose leaves the cluster instead of dying.
  CHECK(sh(c.yard("stop --address " + node_addrs[1])).code == 0);
  CHECK(eventually([&] { return nodes().size() == 2; }, 10s));
}


TEST_CASE("objects from another host come in parts, intact at every size; a dead owner's object fails clearly",
          "[cli][objects]") {
  Cluster c;
  std::vector<int> pids;
  KillAtEnd reaper{pids};
  // YARD_HOST_ID: the node counts as another machine (nothing goes through shared memory).
  setenv("YARD_HOST_ID", "another-host", 1);
  auto [addr, pid] = join_node(c, "--num-cpus 1");
  unsetenv("YARD_HOST_ID");
  pids.push_back(pid);
  std::string node, at = addr;
  REQUIRE(eventually([&] {
    auto status = json::parse(sh(c.yard("status --json --address " + c.addr)).out);
    for (auto& n : status["nodes"])
      if (n["address"].get<std::string>() == at && n["alive"].get<bool>()) node = n["node_id"].get<std::string>();
    return !node.empty();
  }, 10s));
  setenv("YARD_ADDRESS", c.addr.c_str(), 1);
  auto r = sh(probe_bin() + " parts " + node);
  unsetenv("YARD_ADDRESS");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("intact 12 of 12"));
  // The get names the object and its owner.
  CHECK_THAT(r.out, Catch::Matches("(.|\n)*lost the owner of object (\\S+) \\(127\\.0\\.0\\.1:\\d+\\) is gone(.|\n)*"));
  auto lost = r.out.substr(r.out.find("lost "));
  auto id = lost.substr(lost.find("(id ") + 4);
  id = id.substr(0, id.find(')'));
  CHECK_THAT(lost, Catch::Contains("object " + id + " ("));
}

TEST_CASE("yard stop stops the nodes that joined the cluster and says which", "[cli][nodes]") {
  Cluster c;
  std::vector<int> pids;
  KillAtEnd reaper{pids};
  std::vector<std::string> addrs;
  for (int i = 0; i < 2; ++i) {
    auto [addr, pid] = join_node(c, "--num-cpus 1");
    addrs.push_back(addr);
    pids.push_back(pid);
  }
  auto s = sh(c.yard("stop"));
  INFO(s.out);
  CHECK(s.code == 0);
  CHECK_THAT(s.out, Catch::Contains("the head, its node and its Redis, and 2 joined nodes") &&
                        Catch::Contains(addrs[0]) && Catch::Contains(addrs[1]));
  for (int p : pids) CHECK(eventually([&] { return yard::detail::process_dead(p); }, 10s));
}

TEST_CASE("a node whose cluster is gone stops itself after --head-timeout, logging the outage at a bounded rate",
          "[cli][nodes]") {
  Cluster c;
  auto rec = *yard::detail::latest_record();
  auto [addr, node_pid] = join_node(c, "--num-cpus 1 --heartbeat-timeout 0.5 --head-timeout 3");
  struct Reaper {
    int pid;
    ~Reaper() { kill(pid, SIGKILL); }
  } reaper{node_pid};
  auto nrec = *yard::detail::record_for(addr);
  // The head, its node and its Redis vanish (a lost machine): nothing tells the node.
  long head_node = 0, redis = 0;
  std::string redis_addr;
  std::ifstream(rec.session_dir + "/head-node.pid") >> head_node;
  std::ifstream(rec.session_dir + "/redis.address") >> redis_addr >> redis;
  for (long p : {long(c.pid), head_node, redis}) kill(static_cast<pid_t>(p), SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(eventually([&] { return yard::detail::process_dead(node_pid); }, 20s));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took >= 2.5);  // it waited its --head-timeout first
  auto log = sh("cat " + nrec.log_dir + "/*.log 2>/dev/null").out;
  INFO(log);
  CHECK_THAT(log, Catch::Contains("stopping this node and its workers"));
  // Heartbeats fail every 125 ms for 3 s: the same error is logged once, not 24 times.
  size_t lines = 0;
  for (size_t at = log.find("cannot update the node record"); at != std::string::npos;
       at = log.find("cannot update the node record", at + 1))
    ++lines;
  CHECK(lines >= 1);
  CHECK(lines <= 2);
}

TEST_CASE("a cluster paused as a whole (a frozen machine) declares no node dead when it resumes", "[cli][nodes]") {
  Cluster c;  // heartbeat timeout as default (4 s), on the head and the node
  auto rec = *yard::detail::latest_record();
  auto [addr, node_pid] = join_node(c, "--num-cpus 1");
  std::vector<int> node_pids{node_pid};
  KillAtEnd reaper{node_pids};
  long head_node = 0, redis = 0;
  std::string redis_addr;
  std::ifstream(rec.session_dir + "/head-node.pid") >> head_node;
  std::ifstream(rec.session_dir + "/redis.address") >> redis_addr >> redis;
  REQUIRE(head_node > 0);
  REQUIRE(redis > 0);
  std::vector<pid_t> all{static_cast<pid_t>(redis), static_cast<pid_t>(c.pid), static_cast<pid_t>(head_node), node_pid};
  auto nodes = [&] { return json::parse(sh(c.yard("status --json")).out)["nodes"]; };
  REQUIRE(eventually([&] { return nodes().size() == 2; }, 10s));

  // Every process stops longer than the timeout, as when the machine is paused: each heartbeat
  // key has expired in Redis by the time they run again.
  struct Resume {
    std::vector<pid_t> pids;
    ~Resume() {
      for (pid_t p : pids) kill(p, SIGCONT);
    }
  } resume{all};
  for (pid_t p : all) REQUIRE(kill(p, SIGSTOP) == 0);
  std::this_thread::sleep_for(5s);  // the pause under test, not a wait for anything
  for (pid_t p : all) kill(p, SIGCONT);
  double resumed = yard::detail::unix_time();

  // The head sees its own stall and gives the nodes a timeout to heartbeat again; they do.
  auto head_log = [&] { return sh("cat " + rec.log_dir + "/head.log").out; };
  CHECK(eventually([&] { return head_log().find("the failure detector ran") != std::string::npos; }, 10s));
  auto fresh = [&] {
    auto ns = nodes();
    if (ns.size() != 2) return false;
    for (auto& n : ns)
      if (!n["alive"].get<bool>() || std::stod(n.value("heartbeat", "0")) < resumed) return false;
    return true;
  };
  CHECK(eventually(fresh, 15s));
  auto log = head_log();
  INFO(log);
  CHECK(log.find("marked dead") == std::string::npos);
  for (auto& n : nodes()) CHECK(n.value("state", "") != "DEAD");
  CHECK(kill(node_pid, 0) == 0);
}

TEST_CASE("a submitted job whose node is lost runs again on another node while it has retries; its log outlives the node",
          "[cli][nodes]") {
  Cluster c(true, "--heartbeat-timeout 1.5");
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  std::string go = c.home + "/go";
  // Programs run on the head's node while it lives; each says which run it is and waits for `go`.
  std::string program = "sh -c 'echo run $YARD_JOB_ATTEMPT; while [ ! -f " + go + " ]; do sleep 0.1; done; echo finished'";
  auto kept = submit(c, "--max-retries 1 -- " + program);
  auto lost = submit(c, "-- " + program);
  // The node copies what a program writes into the control store (within a quarter second).
  auto status = json::parse(sh(c.yard("status --json")).out);
  auto [rh, rp] = yard::detail::split_address(status["cluster"]["redis"].get<std::string>());
  yard::detail::Redis redis(rh, rp, yard::detail::read_token(rec->session_dir + "/redis/password"), 2s);
  auto in_store = [&](const std::string& id) {
    auto chunks = redis.cmd({"LRANGE", "yard:joblog:" + id, "0", "-1"}).strings();
    std::string all;
    for (auto& ch : chunks) all += ch;
    return all;
  };
  REQUIRE(eventually([&] {
    return in_store(kept).find("run 1") != std::string::npos && in_store(lost).find("run 1") != std::string::npos;
  }, 30s));
  auto [other, other_pid] = join_node(c, "--num-cpus 1 --heartbeat-timeout 1.5");
  // The head's node is lost: its manager is killed, and its programs die with it.
  int head_node = std::stoi(sh("cat " + rec->session_dir + "/head-node.pid").out);
  REQUIRE(kill(head_node, SIGKILL) == 0);
  REQUIRE(eventually([&] { return sh(c.yard("logs " + kept)).out.find("run 2") != std::string::npos; }, 30s));
  REQUIRE(eventually([&] { return has_status(c, lost, "FAILED"); }, 30s));
  std::ofstream(go) << "go\n";
  REQUIRE(eventually([&] { return has_status(c, kept, "SUCCEEDED"); }, 30s));
  // Each log holds every run's lines, wherever the run was, and what the head did in between.
  auto a = sh(c.yard("logs " + kept)).out;
  INFO(a);
  CHECK(a.find("run 1") < a.find("was lost; its program runs again on another node (attempt 2"));
  CHECK(a.find("was lost; its program runs again") < a.find("run 2"));
  CHECK(a.find("run 2") < a.find("finished"));
  auto b = sh(c.yard("logs " + lost)).out;
  INFO(b);
  CHECK_THAT(b, Catch::Contains("run 1"));
  CHECK_THAT(b, Catch::Contains("failed: its program's node"));
  CHECK_THAT(b, Catch::Contains("(no --max-retries)"));
  (void)other;
  (void)other_pid;
}

TEST_CASE("what no node can hold waits, saying why, until a node that can joins; infeasible_timeout fails it",
          "[cli][nodes][waiting]") {
  Cluster c;
  std::string out = c.home + "/waiting.out";
  auto bg = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " infeasible big 0 > " + out + " 2>&1 & echo $!");
  std::vector<int> pids{std::stoi(bg.out)};
  KillAtEnd cleanup{pids};
  REQUIRE(eventually([&] { return file_text(out).find("asked") != std::string::npos; }, 60s));
  // `yard status` lists the task, the actor and the group, each with the reason.
  json waiting;
  auto kinds = [&] {
    waiting = json::parse(sh(c.yard("status --json")).out).value("waiting", json::array());
    std::set<std::string> k;
    for (auto& w : waiting)
      if (w.value("reason", "") == "infeasible" && w.value("detail", "").find("big") != std::string::npos)
        k.insert(w.value("kind", ""));
    return k;
  };
  REQUIRE(eventually([&] { return kinds() == std::set<std::string>{"actor", "placement_group", "tasks"}; }, 30s));
  auto text = sh(c.yard("status")).out;
  CHECK_THAT(text, Catch::Contains("Waiting for nodes that can hold them (3)") && Catch::Contains("infeasible: "));
  // The driver's log says so once for each (the task's with its node's first answer, within a
  // second), and nothing has run or failed.
  CHECK(eventually([&] { return count_of(file_text(out), "tasks needing big: 1 wait: infeasible: ") == 1; }, 10s));
  auto log = file_text(out);
  INFO(log);
  CHECK(count_of(log, "waits: infeasible: actor Holder needs big: 1") == 1);
  CHECK(count_of(log, "waits: infeasible: ") == 2);  // the actor and the group
  CHECK_THAT(log, Catch::Contains("big: 1 wanted, the largest node has 0"));
  for (auto* what : {"\ntask ", "\nactor ", "\ngroup "}) CHECK(log.find(what) == std::string::npos);

  // A node that has it joins: all three go there.
  auto [node, node_pid] = join_node(c, "--num-cpus 2 --resources '{\"big\": 3}'");
  pids.push_back(node_pid);
  REQUIRE(eventually([&] { return file_text(out).find("\ngroup ") != std::string::npos; }, 60s));
  log = file_text(out);
  CHECK(count_of(log, "tasks needing big: 1 wait") == 1);  // said once, however often it was asked
  CHECK_THAT(log, Catch::Contains("task ok") && Catch::Contains("actor ok") && Catch::Contains("group ok"));
  CHECK(eventually([&] { return kinds().empty(); }, 10s));

  // With an infeasible_timeout, what still no node holds fails when it runs out, naming the resource.
  auto timed = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " infeasible huge 1500 2>&1");
  INFO(timed.out);
  CHECK(timed.code == 0);
  CHECK_THAT(timed.out, Catch::Contains("task infeasible: ") && Catch::Contains("actor infeasible: "));
  CHECK(count_of(timed.out, "huge: 1") >= 2);
  CHECK_THAT(timed.out, Catch::Contains("group failed: not placed"));
}

TEST_CASE("with [scheduling] infeasible = \"fail\", what no node can hold fails at once", "[cli][nodes][waiting]") {
  Cluster c(false);
  std::string config = c.home + "/cluster.toml";
  std::ofstream(config) << "[scheduling]\ninfeasible = \"fail\"\n";
  auto port = yard::detail::free_port("127.0.0.1");
  auto r = sh(c.yard("start --head --num-cpus 2 --port " + std::to_string(port) + " --config " + config));
  INFO(r.out);
  REQUIRE(r.code == 0);
  c.addr = "127.0.0.1:" + std::to_string(port);
  c.pid = yard::detail::latest_record()->pid;
  auto run = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " infeasible big 0 2>&1");
  INFO(run.out);
  CHECK_THAT(run.out, Catch::Contains("creating the group infeasible: ") && Catch::Contains("task infeasible: ") &&
                          Catch::Contains("actor infeasible: "));
  CHECK(count_of(run.out, "big") >= 3);
  // A bad value is refused with the file, the key and the choices.
  std::ofstream(config) << "[scheduling]\ninfeasible = \"later\"\n";
  auto bad = sh(c.yard("start --head --num-cpus 1 --port " + std::to_string(yard::detail::free_port("127.0.0.1")) +
                       " --config " + config));
  CHECK(bad.code != 0);
  CHECK_THAT(bad.out, Catch::Contains("scheduling.infeasible") && Catch::Contains("wait or fail"));
}
