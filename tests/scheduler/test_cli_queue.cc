// The job queue through the CLI on a real head: jobs with a shape wait until their MIN replicas
// fit, in priority order; hold, release, priority and cancel; the reason each waits; bad shapes
// refused; the queue outlives a head killed and started again.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "yard/internal/redis.h"

using namespace yard::cli_test;
using json = nlohmann::json;

namespace {

std::string wait_reason(const Cluster& c, const std::string& id) {
  auto row = job_row(c, id);
  if (!row.is_object() || !row.contains("waiting")) return "";
  return row["waiting"].value("reason", "");
}

}  // namespace

TEST_CASE("queued jobs start when their replicas fit, by priority; hold, release and cancel", "[cli][queue]") {
  Cluster c;  // one node of 2 CPUs
  // Of a higher priority than any job below: it is never preempted for them.
  auto a = submit(c, "--replicas 1 --replica CPU=2 --priority 9 -- sh -c 'echo A; exec sleep 60'");
  REQUIRE(eventually([&] { return has_status(c, a, "RUNNING"); }, 20s));
  auto low = submit(c, "--replicas 1:2 --replica CPU=2 --team research --priority 1 -- sh -c 'echo low'");
  auto high = submit(c, "--replicas 1 --replica CPU=2 --team inspection --priority 5 -- sh -c 'echo high; sleep 1'");
  auto never = submit(c, "--replicas 1 --replica GPU=1 -- true");
  auto gone = submit(c, "--replicas 2 --fixed CPU=1 -- true");

  // Each says why it waits; the table shows the queue's columns.
  CHECK(eventually([&] { return wait_reason(c, low) == "no_room" && wait_reason(c, high) == "no_room"; }, 10s));
  CHECK(wait_reason(c, never) == "infeasible");
  auto table = sh(c.yard("jobs"));
  INFO(table.out);
  CHECK_THAT(table.out, Catch::Contains("QUEUED") && Catch::Contains("research") && Catch::Contains("0/1:2") &&
                            Catch::Contains("waiting") && Catch::Contains("no room: needs CPU: 2"));
  auto row = job_row(c, low);
  CHECK(row.value("priority", -1) == 1);
  CHECK(row.value("min_replicas", 0) == 1);
  CHECK(row.value("max_replicas", 0) == 2);

  // Held, the low job stays queued whatever room there is; cancelled, a queued job never runs.
  REQUIRE(sh(c.yard("job hold " + low)).code == 0);
  CHECK(eventually([&] { return wait_reason(c, low) == "held"; }, 10s));
  REQUIRE(sh(c.yard("job cancel " + gone)).code == 0);
  CHECK(has_status(c, gone, "STOPPED"));
  auto refused = sh(c.yard("job hold " + a));
  CHECK(refused.code == 1);
  CHECK_THAT(refused.out, Catch::Contains("only a queued job"));

  // A's end frees the node: the high-priority job goes first; the held one waits until released.
  REQUIRE(sh(c.yard("stop-job " + a)).code == 0);
  CHECK(eventually([&] { return has_status(c, high, "SUCCEEDED"); }, 30s));
  CHECK(has_status(c, low, "QUEUED"));
  CHECK(wait_reason(c, low) == "held");
  REQUIRE(sh(c.yard("job release " + low)).code == 0);
  CHECK(eventually([&] { return has_status(c, low, "SUCCEEDED"); }, 30s));
  CHECK(job_row(c, high).value("start_time", 0.0) <= job_row(c, low).value("start_time", 0.0));
  auto logs = sh(c.yard("logs " + low));
  CHECK_THAT(logs.out, Catch::Contains("low"));
  CHECK(has_status(c, never, "QUEUED"));
  REQUIRE(sh(c.yard("job cancel " + never)).code == 0);
  CHECK(has_status(c, never, "STOPPED"));
}

TEST_CASE("a bad shape or request is refused with what is wrong", "[cli][queue][errors]") {
  Cluster c;
  auto bad = sh(c.yard("submit --replicas 3:1 -- true"));
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Catch::Contains("--replicas '3:1'"));
  auto res = sh(c.yard("submit --replicas 1 --replica CPU=lots -- true"));
  CHECK(res.code == 1);
  CHECK_THAT(res.out, Catch::Contains("--replica 'CPU=lots'"));
  auto team = sh(c.yard("submit --team t -- true"));
  CHECK(team.code == 1);
  CHECK_THAT(team.out, Catch::Contains("need --replicas"));
  auto none = sh(c.yard("job priority job-999 3"));
  CHECK(none.code == 1);
  CHECK_THAT(none.out, Catch::Contains("no job job-999"));
  auto plain = submit(c, "-- true");  // no shape: runs at once, outside the queue
  CHECK(eventually([&] { return has_status(c, plain, "SUCCEEDED"); }, 20s));
  auto hold = sh(c.yard("job hold " + plain));
  CHECK(hold.code == 1);
  CHECK_THAT(hold.out, Catch::Contains("not in the queue"));
}

TEST_CASE("the queue outlives a head killed and started again", "[cli][queue][head]") {
  Cluster c;
  auto a = submit(c, "--replicas 1 --replica CPU=2 --priority 3 -- sh -c 'exec sleep 60'");
  REQUIRE(eventually([&] { return has_status(c, a, "RUNNING"); }, 20s));
  auto b = submit(c, "--replicas 1 --replica CPU=2 --priority 2 -- sh -c 'echo after the takeover'");
  REQUIRE(eventually([&] { return wait_reason(c, b) == "no_room"; }, 10s));
  REQUIRE(sh(c.yard("job hold " + b)).code == 0);

  auto rec = c.take_over();

  // Still queued and held, still behind the running job; released, it runs once A is gone.
  CHECK(eventually([&] { return wait_reason(c, b) == "held"; }, 20s));
  CHECK(job_row(c, b).value("priority", 0) == 2);
  REQUIRE(sh(c.yard("job release " + b)).code == 0);
  CHECK(eventually([&] { return wait_reason(c, b) == "no_room"; }, 10s));
  REQUIRE(sh(c.yard("stop-job " + a)).code == 0);
  CHECK(eventually([&] { return has_status(c, b, "SUCCEEDED"); }, 30s));
}

namespace {
// Starts a head whose cluster configuration is `toml`.
void start_configured(Cluster& c, const std::string& toml) {
  std::string conf = c.home + "/cluster.toml";
  std::ofstream(conf) << toml;
  c.port = yard::detail::free_port("127.0.0.1");
  auto start = sh(c.yard("start --head --num-cpus 2 --port " + std::to_string(c.port) + " --config " + conf));
  INFO(start.out);
  REQUIRE(start.code == 0);
  c.addr = "127.0.0.1:" + std::to_string(c.port);
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  c.pid = rec->pid;
}
}  // namespace

TEST_CASE("a job at MIN gives way: asked to stop, stopped after its grace, queued again, run again as its next attempt",
          "[cli][queue][preempt]") {
  Cluster c(false);
  start_configured(c, "[queue]\nstop_grace_s = 2\n");
  // A program that ignores the request: it gets SIGTERM at the deadline.
  auto low = submit(c, "--replicas 1 --replica CPU=2 -- sh -c 'echo attempt $YARD_JOB_ATTEMPT; exec sleep 60'");
  REQUIRE(eventually([&] { return has_status(c, low, "RUNNING"); }, 20s));
  auto high = submit(c, "--replicas 1 --replica CPU=2 --priority 5 -- sh -c 'echo high; sleep 1'");
  CHECK(eventually([&] { return has_status(c, high, "SUCCEEDED"); }, 30s));
  // The low job was queued again (not ended), then admitted again once the high job was done.
  CHECK(eventually([&] { return has_status(c, low, "RUNNING"); }, 30s));
  CHECK_THAT(job_row(c, low).value("preempted", ""), Catch::StartsWith("stopped at MIN for " + high));
  CHECK(eventually([&] { return sh(c.yard("logs " + low)).out.find("attempt 2") != std::string::npos; }, 20s));
  auto logs = sh(c.yard("logs " + low)).out;
  CHECK_THAT(logs, Catch::Contains("attempt 1") && Catch::Contains("admitted again: attempt 2"));
  // Cancelled, it ends for good.
  REQUIRE(sh(c.yard("job cancel " + low)).code == 0);
  CHECK(eventually([&] { return has_status(c, low, "STOPPED"); }, 20s));

  // A time limit: asked to stop at the limit, stopped after the grace, and ended (not queued again).
  auto limited = submit(c, "--replicas 1 --replica CPU=1 --time-limit 1 -- sh -c 'exec sleep 60'");
  CHECK(eventually([&] { return has_status(c, limited, "STOPPED"); }, 30s));
  CHECK(job_row(c, limited).value("preempted", "").empty());
  auto bad = sh(c.yard("submit --time-limit 5 -- true"));
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Catch::Contains("need --replicas"));
}

TEST_CASE("teams: a credential each, priorities and queued jobs within the team's limits, a ceiling", "[cli][queue][teams]") {
  Cluster c(false);
  start_configured(c, "[teams.inspection]\nmax_priority = 10\nceiling = { CPU = 2 }\n"
                      "[teams.research]\nmax_priority = 2\nceiling = { CPU = 1 }\nmax_queued = 1\n");

  auto cred = [&](const std::string& team) {
    auto r = sh(c.yard("team-credential " + team));
    REQUIRE(r.code == 0);
    return r.out.substr(0, r.out.find('\n'));
  };
  std::string inspection = cred("inspection"), research = cred("research");
  CHECK(inspection.size() == 64);
  CHECK(inspection != research);

  auto missing = sh(c.yard("submit --replicas 1 --team inspection -- true"));
  CHECK(missing.code == 1);
  CHECK_THAT(missing.out, Catch::Contains("team 'inspection': its credential is missing"));
  auto wrong = sh(c.yard("submit --replicas 1 --team inspection --team-credential " + research + " -- true"));
  CHECK(wrong.code == 1);
  CHECK_THAT(wrong.out, Catch::Contains("credential is wrong"));
  auto too_high = sh(c.yard("submit --replicas 1 --team research --priority 5 --team-credential " + research + " -- true"));
  CHECK(too_high.code == 1);
  CHECK_THAT(too_high.out, Catch::Contains("team research may use priority 2 at most, not 5"));
  auto no_team = sh(c.yard("submit --replicas 1 -- true"));
  CHECK(no_team.code == 1);
  CHECK_THAT(no_team.out, Catch::Contains("no team '' in the cluster's configuration"));

  // Research's ceiling is one CPU: its second job waits for it, its third is over its queue cap.
  std::string as_research = "YARD_TEAM_CREDENTIAL=" + research + " ";
  auto r1 = submit(c, "--replicas 1 --team research --team-credential " + research + " -- sh -c 'exec sleep 60'");
  REQUIRE(eventually([&] { return has_status(c, r1, "RUNNING"); }, 20s));
  auto r2 = sh(as_research + c.yard("submit --no-wait --replicas 1 --team research -- true"));
  REQUIRE(r2.code == 0);
  std::string r2_id = r2.out.substr(r2.out.rfind("job-"), r2.out.find_first_of(" \n", r2.out.rfind("job-")) - r2.out.rfind("job-"));
  CHECK(eventually([&] { return wait_reason(c, r2_id) == "team_ceiling"; }, 10s));
  CHECK_THAT(job_row(c, r2_id)["waiting"].value("detail", ""), Catch::Contains("ceiling of CPU: 1"));
  auto r3 = sh(as_research + c.yard("submit --no-wait --replicas 1 --team research -- true"));
  CHECK(r3.code == 1);
  CHECK_THAT(r3.out, Catch::Contains("team research has 1 job waiting in the queue, its limit (max_queued = 1)"));
  // The other CPU is inspection's to use.
  auto i1 = submit(c, "--replicas 1 --team inspection --priority 9 --team-credential " + inspection + " -- sh -c 'echo i1'");
  CHECK(eventually([&] { return has_status(c, i1, "SUCCEEDED"); }, 30s));
  CHECK(has_status(c, r2_id, "QUEUED"));
}

TEST_CASE("the teams' fair-share usage outlives a head killed and started again", "[cli][queue][teams][head]") {
  Cluster c(false);
  const std::string toml = "[teams.a]\n[teams.b]\n";
  start_configured(c, toml);
  auto cred = [&](const std::string& team) {
    auto r = sh(c.yard("team-credential " + team));
    REQUIRE(r.code == 0);
    return r.out.substr(0, r.out.find('\n'));
  };
  std::string a = cred("a"), b = cred("b");
  // Team a holds the whole pool for 8 s.
  auto x = submit(c, "--replicas 1 --replica CPU=2 --team a --team-credential " + a + " -- sh -c 'exec sleep 8'");
  REQUIRE(eventually([&] { return has_status(c, x, "SUCCEEDED"); }, 30s));
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto doc = json::parse(sh(c.yard("status --json")).out);
  auto [rh, rp] = yard::detail::split_address(doc["cluster"]["redis"].get<std::string>());
  yard::detail::Redis redis(rh, rp, yard::detail::read_token(rec->session_dir + "/redis/password"), 2s);
  auto saved = [&](const std::string& team) {
    auto r = redis.cmd({"HGET", "yard:queue:usage", team});
    return r.is_nil() ? 0.0 : std::stod(r.str());
  };
  // Its usage is kept in the control store (a share of 1 for about 8 s).
  REQUIRE(eventually([&] { return saved("a") > 6.0; }, 10s));

  c.take_over("--config " + c.home + "/cluster.toml");

  // Team b holds the pool for a moment while a job of each team queues, a's first. When the room
  // frees, the new head admits b's: a's usage from before the restart still counts.
  auto o = submit(c, "--replicas 1 --replica CPU=2 --team b --team-credential " + b + " -- sh -c 'exec sleep 60'");
  REQUIRE(eventually([&] { return has_status(c, o, "RUNNING"); }, 20s));
  auto a2 = submit(c, "--replicas 1 --replica CPU=2 --team a --team-credential " + a + " -- sh -c 'exec sleep 60'");
  REQUIRE(eventually([&] { return wait_reason(c, a2) == "no_room"; }, 10s));
  auto b2 = submit(c, "--replicas 1 --replica CPU=2 --team b --team-credential " + b + " -- sh -c 'exec sleep 60'");
  REQUIRE(eventually([&] { return wait_reason(c, b2) == "no_room"; }, 10s));
  REQUIRE(sh(c.yard("stop-job " + o)).code == 0);
  REQUIRE(eventually([&] { return has_status(c, b2, "RUNNING"); }, 20s));
  CHECK(has_status(c, a2, "QUEUED"));
  sh(c.yard("stop-job " + b2));
  sh(c.yard("job cancel " + a2));
}

TEST_CASE("a team's tasks count against its ceiling as its actors do", "[cli][queue][teams]") {
  Cluster c(false);
  start_configured(c, "[teams.research]\nceiling = { CPU = 1 }\n");
  auto cred = sh(c.yard("team-credential research"));
  REQUIRE(cred.code == 0);
  std::string as_research = "--team research --team-credential " + cred.out.substr(0, cred.out.find('\n')) + " ";
  // Allotted half a CPU, the job's program runs a task that holds a whole one.
  std::string mark = c.home + "/nap.started";
  auto r1 = submit(c, "--replicas 1 --replica CPU=0.5 " + as_research + "-- " + probe_bin() + " nap " + mark);
  REQUIRE(eventually([&] { return std::ifstream(mark).good(); }, 30s));
  // Its node reports what the lease holds with its next heartbeat.
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto doc = json::parse(sh(c.yard("status --json")).out);
  auto [rh, rp] = yard::detail::split_address(doc["cluster"]["redis"].get<std::string>());
  yard::detail::Redis redis(rh, rp, yard::detail::read_token(rec->session_dir + "/redis/password"), 2s);
  auto reported = [&] {
    for (auto& [node, text] : redis.hgetall("yard:held")) {
      auto held = json::parse(text, nullptr, false);
      if (held.is_object() && held.contains(r1) && held[r1].value("CPU", 0.0) == 1.0) return true;
    }
    return false;
  };
  REQUIRE(eventually(reported, 10s));
  // Half a CPU more would fit the allotments (0.5 + 0.5), not what the team holds (1 + 0.5).
  auto r2 = submit(c, "--replicas 1 --replica CPU=0.5 " + as_research + "-- true");
  CHECK(eventually([&] { return wait_reason(c, r2) == "team_ceiling"; }, 15s));
  CHECK_THAT(job_row(c, r2)["waiting"].value("detail", ""), Catch::Contains("ceiling of CPU: 1"));
  // The task's job ends: its lease goes back, and the second job runs.
  REQUIRE(sh(c.yard("stop-job " + r1)).code == 0);
  CHECK(eventually([&] { return has_status(c, r2, "SUCCEEDED"); }, 30s));
}

namespace {
// The id of the node whose resources name `resource` ("" when none does).
std::string node_with(const Cluster& c, const std::string& resource) {
  auto st = json::parse(sh(c.yard("status --json")).out, nullptr, false);
  if (!st.is_object() || !st["nodes"].is_array()) return "";
  for (auto& n : st["nodes"])
    if (n.value("alive", false) && n["resources_total"].contains(resource)) return n.value("node_id", "");
  return "";
}
}  // namespace

TEST_CASE("a job's program runs on a node that has its --entrypoint-resources; a simulated node hosts one without a process",
          "[cli][queue][entrypoint]") {
  Cluster c;
  std::vector<int> pids;
  KillAtEnd stop_them{pids};
  auto [addr, pid] = join_node(c, "--num-cpus 1 --resources '{\"camera\": 1}'");
  pids.push_back(pid);
  std::string camera = node_with(c, "camera");
  REQUIRE(!camera.empty());

  auto on_camera = submit(c, "--entrypoint-resources camera=1 -- sh -c 'echo on camera'");
  auto anywhere = submit(c, "-- true");
  REQUIRE(eventually([&] { return has_status(c, on_camera, "SUCCEEDED") && has_status(c, anywhere, "SUCCEEDED"); }, 30s));
  CHECK(job_row(c, on_camera).value("node", "") == camera);
  CHECK(job_row(c, anywhere).value("node", "") != camera);  // the head's node
  CHECK_THAT(sh(c.yard("logs " + on_camera)).out, Catch::Contains("on camera"));
  // No node has them: refused, saying so.
  auto none = sh(c.yard("submit --no-wait --entrypoint-resources lidar=1 -- true"));
  CHECK(none.code != 0);
  CHECK_THAT(none.out, Catch::Contains("no live node has the job's entrypoint resources lidar: 1"));
  auto bad = sh(c.yard("submit --no-wait --entrypoint-resources lidar -- true"));
  CHECK(bad.code != 0);
  CHECK_THAT(bad.out, Catch::Contains("--entrypoint-resources 'lidar'"));

  // Simulated nodes: a queued job admitted there runs no process, and ends when cancelled.
  auto sim = sh(c.yard("start --address " + c.addr + " --simulate 2 --num-cpus 1 --resources '{\"sim\": 4}'"));
  INFO(sim.out);
  REQUIRE(sim.code == 0);
  auto at = sim.out.find("(pid ");
  REQUIRE(at != std::string::npos);
  pids.push_back(std::stoi(sim.out.substr(at + 5)));
  REQUIRE(eventually([&] { return !node_with(c, "sim").empty(); }, 20s));
  auto simulated = submit(c, "--replicas 1 --replica sim=1 --entrypoint-resources sim=1 -- no-such-program");
  REQUIRE(eventually([&] { return has_status(c, simulated, "RUNNING"); }, 20s));
  auto row = job_row(c, simulated);
  CHECK(row.value("node", "").size() > 0);
  CHECK(row.value("node", "") != camera);
  CHECK(row.value("replicas", 0) == 1);
  REQUIRE(sh(c.yard("job cancel " + simulated)).code == 0);
  CHECK(eventually([&] { return has_status(c, simulated, "STOPPED"); }, 20s));
}
