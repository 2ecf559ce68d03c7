// The yard CLI and head daemon driven as a user would, with real processes. Every cluster a test
// starts is stopped by a guard, also when the test fails.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "yard/process.h"
#include "support.h"
#include "yard/internal/redis.h"
#include "yard/internal/session.h"
#include "wire.h"
#include "cli_support.h"

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using namespace yard::cli_test;

namespace {

std::string counter_bin() { return getenv("COUNTER_BIN"); }

// Pids of processes whose command line mentions `needle` (other than this one).
std::vector<int> processes_mentioning(const std::string& needle) {
  std::vector<int> out;
  for (auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (auto& c : cmd) if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos && std::stoi(name) != getpid()) out.push_back(std::stoi(name));
  }
  return out;
}

// Starts `argv` with stdout (and stdin) on pipes. Stays alive until the caller kills it.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
  int in_fd = -1;
  explicit Child(const std::vector<std::string>& argv) {
    int o[2], i[2];
    REQUIRE(pipe(o) == 0);
    REQUIRE(pipe(i) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(o[1], 1);
      dup2(i[0], 0);
      close(o[0]); close(o[1]); close(i[0]); close(i[1]);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(o[1]);
    close(i[0]);
    out = fdopen(o[0], "r");
    in_fd = i[1];
  }
  std::string line() {
    char buf[512];
    return fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  int wait_exit() {
    int st = 0;
    waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out) fclose(out);
    if (in_fd >= 0) close(in_fd);
  }
};

}  // namespace

// A test's cluster that `yard stop` could not end is killed at the test's end by what names its
// directory: its command line, or YARD_HOME in its environment (cli_support.h's Cluster).
TEST_CASE("what a test's cluster left is killed by its directory", "[cli]") {
  char tmpl[] = "/tmp/yard-cli-left-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/log") << "x\n";
  yard::sys::SpawnOptions with_home;
  with_home.env["YARD_HOME"] = dir;
  pid_t by_env = yard::sys::spawn({"/bin/sleep", "60"}, with_home);
  pid_t by_arg = yard::sys::spawn({"/usr/bin/tail", "-f", dir + "/log"}, {});
  pid_t other = yard::sys::spawn({"/bin/sleep", "61"}, {});
  std::vector<int> started{by_env, by_arg, other};
  KillAtEnd cleanup{started};  // also when a check below fails
  // Both have exec'd once /proc shows their new command lines.
  auto execd = [](pid_t p, const std::string& prog) {
    return yard::test::proc_file(p, "cmdline").find(prog) != std::string::npos;
  };
  REQUIRE(eventually([&] { return execd(by_env, "sleep") && execd(by_arg, "tail") && execd(other, "sleep"); }, 10s));
  CHECK(yard::test::kill_processes_of(dir) == 2);
  int st = 0;
  CHECK(waitpid(by_env, &st, 0) == by_env);
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL));
  CHECK(waitpid(by_arg, &st, 0) == by_arg);
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL));
  CHECK(kill(other, 0) == 0);  // not this directory's
  std::filesystem::remove_all(dir);
}

TEST_CASE("--help works on every command", "[cli]") {
  for (std::string c : {"", "start", "stop", "status", "submit", "jobs", "logs", "stop-job"}) {
    auto r = sh(yard_bin() + " " + c + " --help");
    INFO(c << ": " << r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("Usage"));
  }
}

TEST_CASE("start, status and stop a head", "[cli]") {
  Cluster c;
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  CHECK(rec->address == c.addr);
  struct stat st;
  REQUIRE(stat(rec->token_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  auto r = sh(c.yard("status"));
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("ALIVE") && Catch::Contains("CPU: 0/2") && Catch::Contains(rec->log_dir));

  auto j = sh(c.yard("status --json"));
  REQUIRE(j.code == 0);
  auto doc = json::parse(j.out);
  REQUIRE(doc["nodes"].size() == 1);
  CHECK(doc["nodes"][0]["resources_total"]["CPU"].get<double>() == 2.0);
  CHECK(doc["nodes"][0]["alive"].get<bool>());

  // Secrets stay out of sight: Redis has a password of its own (not the token), in files of mode
  // 0600; no command line of any process holds either, and another user reads neither from any
  // process's command line or environment.
  std::string token = yard::detail::read_token(rec->token_file);
  std::string password = yard::detail::read_token(rec->session_dir + "/redis/password");
  CHECK(password.size() >= 32);
  CHECK(password != token);
  for (auto f : {rec->session_dir + "/redis/password", rec->session_dir + "/redis/redis.conf"}) {
    REQUIRE(stat(f.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  for (auto& e : fs::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(e.path() << ": " << args);
    CHECK(args.find(token) == std::string::npos);
    CHECK(args.find(password) == std::string::npos);
  }
  {
    auto [rh, rp] = yard::detail::split_address(doc["cluster"]["redis"].get<std::string>());
    CHECK_THROWS(yard::detail::Redis(rh, rp, token, 2s));  // the token does not open the control store
    CHECK(yard::detail::Redis(rh, rp, password, 2s).cmd({"PING"}).str() == "PONG");
  }
  if (geteuid() == 0 && sh("id -u nobody").code == 0) {
    auto other = sh("runuser -u nobody -- sh -c 'ps -eo args; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline' 2>/dev/null");
    CHECK(other.out.size() > 100);  // it did read what another user may read
    CHECK(other.out.find(token) == std::string::npos);
    CHECK(other.out.find(password) == std::string::npos);
  }

  // The head service, its node manager and its Redis are three processes; `yard stop` stops all.
  long node_pid = 0, redis_pid = 0;
  std::string redis_addr;
  std::ifstream(rec->session_dir + "/head-node.pid") >> node_pid;
  std::ifstream(rec->session_dir + "/redis.address") >> redis_addr >> redis_pid;
  REQUIRE(node_pid > 0);
  REQUIRE(redis_pid > 0);
  CHECK(node_pid != c.pid);
  CHECK(kill(static_cast<pid_t>(node_pid), 0) == 0);
  auto s = sh(c.yard("stop"));
  INFO(s.out);
  CHECK(s.code == 0);
  CHECK(eventually([&] { return kill(c.pid, 0) != 0; }, 10s));
  CHECK(eventually([&] { return yard::detail::process_dead(static_cast<pid_t>(node_pid)); }, 10s));
  CHECK(eventually([&] { return yard::detail::process_dead(static_cast<pid_t>(redis_pid)); }, 10s));
  CHECK_FALSE(yard::detail::latest_record());
}

TEST_CASE("yard stop after the head service was killed stops what it left", "[cli]") {
  Cluster c;
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  long node_pid = 0, redis_pid = 0;
  std::string redis_addr;
  std::ifstream(rec->session_dir + "/head-node.pid") >> node_pid;
  std::ifstream(rec->session_dir + "/redis.address") >> redis_addr >> redis_pid;
  REQUIRE(node_pid > 0);
  kill(c.pid, SIGKILL);
  REQUIRE(eventually([&] { return yard::detail::process_dead(c.pid); }, 10s));
  CHECK(kill(static_cast<pid_t>(node_pid), 0) == 0);  // the head's node outlives it
  auto s = sh(c.yard("stop"));
  INFO(s.out);
  CHECK(s.code == 0);
  CHECK_THAT(s.out, Catch::Contains("is gone"));
  CHECK(eventually([&] { return yard::detail::process_dead(static_cast<pid_t>(node_pid)); }, 10s));
  CHECK(eventually([&] { return yard::detail::process_dead(static_cast<pid_t>(redis_pid)); }, 10s));
  CHECK_FALSE(yard::detail::latest_record());
}

TEST_CASE("a second head on a busy port fails with a clear error", "[cli][errors]") {
  Cluster c;
  auto r = sh(c.yard("start --head --port " + std::to_string(c.port)));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("already in use"));
  CHECK(sh(c.yard("status")).code == 0);  // the first one is unharmed
}

TEST_CASE("a program joins a running head through YARD_ADDRESS", "[cli][jobs]") {
  Cluster c;
  auto r = sh("YARD_ADDRESS=" + c.addr + " " + counter_bin());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("connected to " + c.addr) && Catch::Contains("sum of 100 tasks = 9900"));
}

TEST_CASE("a program that exits with work still running neither retries nor reports lost workers", "[cli][jobs]") {
  Cluster c;
  auto r = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " leave " + c.home);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("both started"));
  CHECK_THAT(r.out, !Catch::Contains("retrying") && !Catch::Contains("was lost") && !Catch::Contains("asking the head"));
}

TEST_CASE("a job's timeline has every task and actor call on the worker that ran it", "[cli][timeline]") {
  Cluster c;
  auto r = sh("YARD_ADDRESS=" + c.addr + " " + probe_bin() + " timeline");
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::map<long, int> task_pids;  // worker pid -> tasks it ran
  std::vector<long> actor_pids;
  long driver_pid = 0, named_pid = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string what;
    words >> what;
    if (what == "driver" || what == "named") {
      words >> (what == "driver" ? driver_pid : named_pid);
      continue;
    }
    for (long pid; words >> pid;) what == "tasks" ? (void)++task_pids[pid] : actor_pids.push_back(pid);
  }
  REQUIRE(driver_pid > 0);
  REQUIRE(actor_pids.size() == 3);
  std::string file = c.home + "/trace.json";
  nlohmann::json doc;
  std::map<long, int> spans_on;  // worker pid -> "my_pid" spans on its row
  std::vector<long> call_rows;
  double fetched = 0;  // bytes of the driver's transfer span
  long named_row = 0;  // the row of the span named by its caller
  // The spans arrive within 50 ms of each task; the last ones may still be on their way.
  bool complete = eventually([&] {
    auto t = sh(c.yard("timeline -o " + file + " --address " + c.addr));
    if (t.code != 0) return false;
    doc = nlohmann::json::parse(std::ifstream(file));
    spans_on.clear();
    call_rows.clear();
    named_row = 0;
    for (auto& e : doc["traceEvents"]) {
      if (e["ph"] != "X") continue;
      if (e["name"] == "my_pid" && e["cat"] == "task" && e["dur"].get<double>() >= 0) ++spans_on[e["tid"].get<long>()];
      if (e["name"] == "Pid.pid" && e["cat"] == "actor_call") call_rows.push_back(e["tid"].get<long>());
      if (e["name"] == "named-task" && e["cat"] == "task") named_row = e["tid"].get<long>();
      if (e["cat"] == "transfer" && e["tid"].get<long>() == driver_pid && e["dur"].get<double>() >= 0)
        fetched = e["args"]["bytes"].get<double>();
    }
    return spans_on == task_pids && call_rows.size() == 3 && fetched > 0 && named_row > 0;
  }, 10s);
  INFO(doc.dump().substr(0, 2000));
  CHECK(complete);
  std::sort(call_rows.begin(), call_rows.end());
  std::sort(actor_pids.begin(), actor_pids.end());
  CHECK(call_rows == actor_pids);
  CHECK(named_row == named_pid);  // a task named by its caller: its span has the name
  // The object the driver fetched from an actor: a transfer span on the driver's row, with its bytes.
  CHECK(fetched >= (1 << 20));
  // Every row is named: the worker and its pid.
  std::set<long> named;
  for (auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(e["tid"].get<long>());
  for (auto& [pid, n] : task_pids) CHECK(named.count(pid));
  // A job that does not exist is refused by name.
  auto missing = sh(c.yard("timeline job-nope --address " + c.addr));
  CHECK(missing.code != 0);
  CHECK_THAT(missing.out, Catch::Contains("no job job-nope"));
}

TEST_CASE("objects past the node's memory limit spill to disk and come back intact", "[cli][objects]") {
  Cluster c(false);
  int port = yard::detail::free_port("127.0.0.1");
  auto r = sh(yard_bin() + " start --head --num-cpus 2 --object-store-memory 48MB --port " + std::to_string(port));
  INFO(r.out);
  REQUIRE(r.code == 0);
  c.addr = "127.0.0.1:" + std::to_string(port);
  c.pid = yard::detail::latest_record()->pid;
  setenv("YARD_ADDRESS", c.addr.c_str(), 1);
  Child p({probe_bin(), "spill", "8"});  // 128 MB of objects
  unsetenv("YARD_ADDRESS");
  REQUIRE(p.line() == "put\n");
  json node;
  auto spilled = [&] {
    auto j = json::parse(sh(c.yard("status --json --address " + c.addr)).out);
    for (auto& n : j["nodes"])
      if (std::stoull(n.value("spilled_objects", std::string("0"))) > 0 &&
          std::stoull(n.value("object_store_used", std::string("0"))) <= (48u << 20))
        node = n;
    return !node.is_null();
  };
  REQUIRE(eventually(spilled, 20s));
  CHECK(node.value("object_store_limit", std::string()) == std::to_string(48u << 20));
  CHECK(std::stoull(node.value("spilled_bytes", std::string("0"))) >= (80u << 20));
  auto st = sh(c.yard("status --address " + c.addr));
  CHECK_THAT(st.out, Catch::Contains("objects:") && Catch::Contains("spilled"));
  auto spill_files = [&] {
    int n = 0;
    for (auto& e : fs::recursive_directory_iterator(c.home))
      n += e.path().parent_path().filename().string().rfind("spill-", 0) == 0;
    return n;
  };
  CHECK(spill_files() >= 5);
  REQUIRE(write(p.in_fd, "go\n", 3) == 3);
  CHECK(p.line() == "intact 8\n");
  CHECK(p.wait_exit() == 0);
  CHECK(eventually([&] { return spill_files() == 0; }, 10s));  // gone with the driver's objects
}

TEST_CASE("submit runs a job, streams its output and returns its exit code", "[cli][jobs]") {
  Cluster c;
  auto r = sh(c.yard("submit --address " + c.addr + " -- " + counter_bin()));
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("sum of 100 tasks = 9900") && Catch::Contains("job-"));

  auto f = sh(c.yard("submit -- sh -c 'echo bye; exit 3'"));
  INFO(f.out);
  CHECK(f.code == 3);
  CHECK_THAT(f.out, Catch::Contains("bye"));

  auto jobs = sh(c.yard("jobs"));
  INFO(jobs.out);
  CHECK_THAT(jobs.out, Catch::Contains("SUCCEEDED") && Catch::Contains("FAILED"));
}

TEST_CASE("logs and stop-job on a running job", "[cli][jobs]") {
  Cluster c;
  auto s = sh(c.yard("submit --no-wait -- sh -c 'echo started; exec sleep 60'"));
  REQUIRE(s.code == 0);
  std::string id = s.out.substr(s.out.rfind("job-"));
  id = id.substr(0, id.find_first_of(" \n"));
  CHECK(eventually([&] { return sh(c.yard("logs " + id)).out.find("started") != std::string::npos; }, 10s));
  auto st = sh(c.yard("stop-job " + id));
  CHECK(st.code == 0);
  CHECK(eventually([&] { return sh(c.yard("jobs")).out.find("STOPPED") != std::string::npos; }, 10s));
  auto f = sh(c.yard("logs --follow " + id));
  CHECK(f.code != 0);
  CHECK(sh(c.yard("logs job-999")).code == 1);
}

TEST_CASE("a wrong or missing token is rejected with a clear error", "[cli][security]") {
  Cluster c;
  auto r = sh("YARD_TOKEN=not-the-token " + c.yard("status"));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("wrong cluster token"));
  auto p = sh("YARD_ADDRESS=" + c.addr + " YARD_TOKEN=not-the-token " + counter_bin());
  CHECK(p.code != 0);
  CHECK_THAT(p.out, Catch::Contains("rejected"));
}

TEST_CASE("a wrong address fails fast with the address in the message", "[cli][errors]") {
  Cluster c(false);
  int dead = yard::detail::free_port("127.0.0.1");
  std::string addr = "127.0.0.1:" + std::to_string(dead);
  auto t0 = std::chrono::steady_clock::now();
  auto r = sh("YARD_TOKEN=x " + c.yard("status --address " + addr));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains(addr));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  auto b = sh("YARD_TOKEN=x " + c.yard("status --address nonsense"));
  CHECK(b.code == 1);
  CHECK_THAT(b.out, Catch::Contains("host:port"));
  auto p = sh("YARD_ADDRESS=" + addr + " YARD_TOKEN=x " + counter_bin());
  CHECK(p.code != 0);
  CHECK_THAT(p.out, Catch::Contains(addr));
}

TEST_CASE("Redis unreachable: the head says so and exits", "[cli][errors]") {
  Cluster c(false);
  int dead = yard::detail::free_port("127.0.0.1");
  auto r = sh(c.yard("start --head --port 0 --redis-address 127.0.0.1:" + std::to_string(dead)));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("cannot reach Redis"));
}

TEST_CASE("a control store of a newer format: the head refuses it and says what to do", "[cli][errors]") {
  Cluster c(false);
  yard::sys::RedisServer server;
  yard::detail::Redis redis("127.0.0.1", server.port(), "", 5s);
  redis.cmd({"RPUSH", "yard:jobs", "job-1"});
  redis.cmd({"HSET", "yard:cluster", "format", "7"});
  auto addr = "127.0.0.1:" + std::to_string(server.port());
  auto r = sh(c.yard("start --head --port 0 --redis-address " + addr));
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("the control store at " + addr + " cannot be used: it was written by a newer "
                                    "Switchyard (format 7; this head reads formats up to 2): start the head of that "
                                    "version, or point this one at a fresh Redis"));
  // Nothing of it was changed.
  CHECK(redis.cmd({"HGET", "yard:cluster", "format"}).str() == "7");
  CHECK(redis.cmd({"LLEN", "yard:jobs"}).integer() == 1);
}

TEST_CASE("malformed, truncated and random bytes leave the head serving", "[cli][robustness]") {
  Cluster c;
  auto prog = sh("YARD_ADDRESS=" + c.addr + " " + counter_bin());
  REQUIRE(prog.code == 0);
  auto tok = yard::detail::read_token(yard::detail::latest_record()->token_file);

  zmq::context_t ctx;
  std::mt19937 rng(7);
  auto probe = [&](const std::string& target) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 5000);
    s.connect("tcp://" + target);
    int answered = 0;
    for (int i = 0; i < 50; ++i) {
      std::string junk(rng() % 200, '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      s.send(zmq::buffer(junk), zmq::send_flags::none);
      if (auto in = yard::test::recv_reply(s)) {
        CHECK(in->env().getBody().isError());
        ++answered;
      }
    }
    CHECK(answered == 50);
    // Crafted envelopes: a valid one cut short at every word, a segment table declaring far more
    // words (and segments) than sent, a pointer to a list of 2^29 elements in a 3-word message.
    yard::detail::OutMessage good(tok, 5, false);
    good.env().getBody().initGetActor().setName("x");
    auto gf = good.finish();
    std::string whole(static_cast<const char*>(gf[0].data()), gf[0].size());
    std::vector<std::string> crafted;
    for (size_t cut = 8; cut < whole.size(); cut += 8) crafted.push_back(whole.substr(0, cut));
    auto words = [](std::vector<uint32_t> w) { return std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4); };
    crafted.push_back(words({0, 0x7fffffff}));                       // one segment of 2^31 words
    crafted.push_back(words({0x0fffffff, 1, 1, 0}));                 // 2^28 segments
    crafted.push_back(words({0, 2, 0x00000001, 0x00010000, 0x00000001, 0xfffffffd}));  // huge list
    for (auto& c : crafted) {
      s.send(zmq::buffer(c), zmq::send_flags::none);
      auto in = yard::test::recv_reply(s);
      REQUIRE(in);
      CHECK(in->env().getBody().isError());
    }
    // A valid request still works.
    yard::detail::OutMessage ping(tok, 99, false);
    ping.env().getBody().setPing();
    auto fr = ping.finish();
    s.send(fr[0], zmq::send_flags::none);
    auto in = yard::test::recv_reply(s);
    REQUIRE(in);
    CHECK(in->env().getBody().isOk());
  };
  probe(c.addr);
  // A node manager's port, the same way.
  std::vector<int> started;
  KillAtEnd kill_at_end{started};
  auto [node_addr, node_pid] = join_node(c, "--num-cpus 1 --port 0");
  started.push_back(node_pid);
  probe(node_addr);
  CHECK(kill(node_pid, 0) == 0);

  // Raw TCP garbage (not even ZMTP) on the head's port.
  for (int i = 0; i < 20; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(c.port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::string junk(1 + rng() % 500, '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      (void)!write(fd, junk.data(), junk.size());
    }
    close(fd);
  }
  auto r = sh(c.yard("status"));
  CHECK(r.code == 0);
  CHECK(sh("YARD_ADDRESS=" + c.addr + " " + counter_bin()).code == 0);
}

TEST_CASE("an embedded cluster goes away with its program: exit, kill -9, Ctrl-C", "[cli][embedded]") {
  Cluster c(false);
  for (int sig : {0, SIGKILL, SIGINT}) {
    INFO("signal " << sig);
    Child p({probe_bin(), "embedded"});
    std::string l = p.line();
    REQUIRE(l.rfind("ready ", 0) == 0);
    auto [host, port] = yard::detail::split_address(l.substr(6, l.size() - 7));
    CHECK(yard::detail::port_open(host, port));
    CHECK_FALSE(processes_mentioning(c.home).empty());  // its redis-server and head
    if (sig == 0) sig = SIGTERM;
    kill(p.pid, sig);
    p.wait_exit();
    CHECK(eventually([&] { return !yard::detail::port_open(host, port); }, 15s));
    CHECK(eventually([&] { return processes_mentioning(c.home).empty(); }, 15s));
  }
}

TEST_CASE("an embedded cluster's logs outlive it; the rest of its session goes", "[cli][embedded]") {
  Cluster c(false);
  Child p({probe_bin(), "actor"});
  REQUIRE(p.line() == "ready\n");
  REQUIRE(write(p.in_fd, "\n", 1) == 1);
  CHECK(p.wait_exit() == 0);
  namespace fs = std::filesystem;
  fs::path latest = fs::path(c.home) / "logs" / "latest";
  REQUIRE(fs::is_directory(latest));
  uintmax_t bytes = 0;
  size_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(latest))
    if (e.is_regular_file()) ++files, bytes += e.file_size();
  CHECK(files >= 2);  // the head's and at least the actor's worker
  CHECK(bytes > 0);
  for (auto& e : fs::directory_iterator(c.home))
    CHECK(e.path().filename().string().rfind("embedded-", 0) == std::string::npos);
}

TEST_CASE("malformed bytes to a worker's socket leave the actor serving", "[cli][robustness]") {
  Cluster c;
  setenv("YARD_ADDRESS", c.addr.c_str(), 1);
  Child p({probe_bin(), "actor"});
  unsetenv("YARD_ADDRESS");
  REQUIRE(p.line() == "ready\n");
  auto doc = json::parse(sh(c.yard("status --json")).out);
  std::string worker_addr;
  for (auto& a : doc["actors"])
    if (a["name"] == "probe-holder") worker_addr = a["address"];
  REQUIRE_FALSE(worker_addr.empty());
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect("tcp://" + worker_addr);
  std::mt19937 rng(11);
  for (int i = 0; i < 50; ++i) {
    std::string junk(rng() % 300, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    s.send(zmq::buffer(junk), zmq::send_flags::none);
    auto in = yard::test::recv_reply(s);
    REQUIRE(in);
    CHECK(in->env().getBody().isError());
  }
  // A well-formed call with a wrong token is refused too.
  yard::detail::OutMessage bad("wrong", 5, false);
  bad.env().getBody().initPushTask().setFunction("ping");
  auto fr = bad.finish();
  s.send(fr[0], zmq::send_flags::none);
  auto in = yard::test::recv_reply(s);
  REQUIRE(in);
  REQUIRE(in->env().getBody().isError());
  CHECK(in->env().getBody().getError().getCode() == yard::wire::ErrorCode::UNAUTHENTICATED);
  // The actor still answers its owner.
  (void)!write(p.in_fd, "\n", 1);
  CHECK(p.wait_exit() == 0);
}
