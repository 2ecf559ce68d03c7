// `yard`: start and stop a cluster, look at it, and run jobs on it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "blocking_client.h"
#include "job_commands.h"
#include "status_command.h"
#include "stop_cluster.h"
#include "common/credentials.h"
#include "common/web_server.h"
#include "autoscale/config.h"
#include "daemon.h"
#include "log_command.h"
#include "yard/process.h"
#include "yard/internal/messaging.h"
#include "yard/internal/session.h"
#include "yard/errors.h"

using json = nlohmann::json;
using namespace yard;

namespace {

std::atomic<bool> g_interrupted{false};

sched::BlockingClient connect(const std::string& address, const std::string& token) {
  auto ep = detail::resolve_endpoint(address, token);
  return sched::BlockingClient(ep.address, ep.token);
}

int start(sched::StartOptions o, bool block) {
  if (block) return sched::run_daemon(o);
  int fds[2];
  if (pipe(fds) != 0) throw Error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2) close(devnull);
    o.ready_fd = fds[1];
    // Errors before the log file exists still reach the parent through the ready pipe.
    int rc = sched::run_daemon(o);
    _exit(rc);
  }
  close(fds[1]);
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char c;
    if (read(fds[0], &c, 1) <= 0 || c == '\n') break;
    line.push_back(c);
  }
  close(fds[0]);
  if (line.empty()) {
    std::cerr << "yard: the head did not report ready within 30 s\n";
    return 1;
  }
  if (line.rfind("ERROR: ", 0) == 0) {
    std::cerr << "yard: " << line.substr(7) << "\n";
    return 1;
  }
  auto space = line.find(' ');
  std::string addr = line.substr(0, space);
  auto rec = detail::record_for(addr);
  if (o.simulate > 0) {
    std::cout << o.simulate << " simulated nodes started (pid " << pid << "), joined " << o.join_address
              << "; the first listens at " << addr << "\n"
              << "Stop them with:          kill " << pid << "\n";
    return 0;
  }
  if (!o.standby_of.empty()) {
    std::cout << "Switchyard standby head started at " << addr << " (pid " << pid << "), for the head at " << o.standby_of
              << "\n  It takes the cluster over when that head is lost. Clients follow both with\n"
              << "  YARD_ADDRESS=" << o.standby_of << "," << addr << "\n";
    return 0;
  }
  std::cout << (o.join_address.empty() ? "Switchyard head started at " : "Switchyard node started at ") << addr
            << (o.join_address.empty() ? "" : ", joined " + o.join_address) << " (pid " << pid << ")\n"
            << "  token file: " << line.substr(space + 1) << "\n";
  if (rec) std::cout << "  logs:       " << rec->log_dir << "\n";
  if (!o.join_address.empty()) {
    std::cout << "Stop it with:            yard stop --address " << addr << "\n";
    return 0;
  }
  std::cout << "Connect a program with:  YARD_ADDRESS=" << addr << " ./your_program\n"
            << "Submit a job with:       yard submit --address " << addr << " -- ./your_program\n"
            << "Stop it with:            yard stop\n";
  return 0;
}

// Prometheus' file-based service discovery: the head's and every alive node's metrics endpoint.
int metrics_targets(const std::string& address, const std::string& token, const std::string& out) {
  auto c = connect(address, token);
  auto r = c.call([](auto env) { env.getBody().setStatus(); });
  auto j = json::parse(std::string(r->env().getBody().getStatusReply()));
  json targets = json::array();
  bool https = false;
  // An endpoint recorded as "https://host:port" is scraped with `__scheme__` https.
  auto add = [&](std::string endpoint, json labels) {
    if (endpoint.rfind("https://", 0) == 0) {
      endpoint = endpoint.substr(8);
      labels["__scheme__"] = "https";
      https = true;
    }
    targets.push_back({{"targets", {endpoint}}, {"labels", labels}});
  };
  std::string head = j["cluster"].value("metrics", "");
  if (!head.empty()) add(head, {{"yard_role", "head"}});
  for (auto& n : j["nodes"])
    if (n.value("alive", false) && !n.value("metrics", "").empty())
      add(n.value("metrics", ""), {{"yard_role", "node"}, {"yard_node", n.value("node_id", "")}});
  if (targets.empty()) std::cerr << "yard: no metrics endpoints (start the head and nodes with --metrics-port)\n";
  if (https)
    std::cerr << "yard: the endpoints serve HTTPS: scrape with tls_config: {ca_file: "
              << j["cluster"].value("session_dir", "<session>") << "/web/tls.crt, server_name: " << sched::kWebTlsName
              << "}\n";
  std::string text = targets.dump(2) + "\n";
  if (out.empty()) {
    std::cout << text;
  } else {
    // Whole or not at all: Prometheus may read it at any moment.
    std::string tmp = out + ".tmp";
    std::ofstream(tmp) << text;
    if (std::rename(tmp.c_str(), out.c_str()) != 0) throw Error("cannot write " + out + ": " + std::strerror(errno));
  }
  return targets.empty() ? 1 : 0;
}

// A job's timeline (the latest job's without one) as a Chrome trace.
int timeline(const std::string& address, const std::string& token, const std::string& job, const std::string& out) {
  auto c = connect(address, token);
  auto r = c.call([&](auto env) { env.getBody().setTimeline(job); });
  std::string trace = r->env().getBody().getTimelineReply();
  if (out.empty()) {
    std::cout << trace << "\n";
    return 0;
  }
  std::ofstream f(out);
  f << trace << "\n";
  if (!f) throw Error("cannot write " + out);
  auto doc = json::parse(trace);
  std::cerr << "wrote " << out << ": " << doc["otherData"].value("spans", 0) << " spans of job "
            << doc["otherData"].value("job", "") << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
  return 0;
}

// The dashboard's address with the token (what a browser opens).
int dashboard(const std::string& address, const std::string& token) {
  auto ep = detail::resolve_endpoint(address, token);
  sched::BlockingClient c(ep.address, ep.token);
  auto r = c.call([](auto env) { env.getBody().setStatus(); });
  auto j = json::parse(std::string(r->env().getBody().getStatusReply()));
  std::string url = j["cluster"].value("dashboard", "");
  if (url.empty()) throw Error("the head at " + ep.address + " serves no dashboard (started with --dashboard-port -1?)");
  std::cout << url << "/?key=" << detail::web_key_for(ep.token) << "\n";
  return 0;
}

// Packs a directory (tar.gz), uploads it to the head unless it is there already, returns its digest.
std::string upload_dir(sched::BlockingClient& c, const std::string& dir) {
  std::string cmd = "tar -czf - -C '" + dir + "' .";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw Error("cannot run tar");
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  constexpr size_t kMax = 256u << 20;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    bytes.append(buf, n);
    if (bytes.size() > kMax) {
      pclose(p);
      throw Error("the working directory " + dir + " packs to more than 256 MiB; leave large data out of it");
    }
  }
  if (pclose(p) != 0) throw Error("cannot pack " + dir + " with tar");
  std::string digest = detail::sha256_hex(bytes.data(), bytes.size());
  try {
    c.call([&](auto env) { env.getBody().setHasBlob(digest); });
    return digest;  // already uploaded
  } catch (const NotFoundError&) {
  }
  c.call(
      [&](auto env) {
        auto pb = env.getBody().initPutBlob();
        pb.setDigest(digest);
        pb.initData().setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
      },
      std::chrono::seconds(120));
  std::cerr << "yard: uploaded " << dir << " (" << bytes.size() << " bytes, " << digest.substr(0, 12) << ")\n";
  return digest;
}

// Streams a job's log from `offset`; returns the job's exit code once it has ended, or -1 when
// not following and the job is still running.
int follow_logs(sched::BlockingClient& c, const std::string& job, bool follow) {
  uint64_t off = 0;
  for (;;) {
    auto r = c.call([&](auto env) {
      auto jl = env.getBody().initJobLogs();
      jl.setJobId(job);
      jl.setOffset(off);
      jl.setMaxBytes(1 << 20);
    });
    auto lr = r->env().getBody().getJobLogsReply();
    auto d = lr.getData();
    if (d.size()) {
      fwrite(d.begin(), 1, d.size(), stdout);
      fflush(stdout);
    }
    off = lr.getNextOffset();
    if (lr.getFinished()) return lr.getExitCode();
    if (d.size() == 0) {
      if (!follow) return -1;
      if (g_interrupted.load()) {
        std::cerr << "\nyard: stopped following; job " << job << " keeps running (yard stop-job " << job << ")\n";
        return 130;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// Everything the command line can say, filled by CLI11.
struct Args {
  std::string address, token;
  sched::StartOptions dopts;
  bool head = false, block = false, standby = false;
  std::string resources_json, join;
  bool as_json = false, verbose = false;
  std::vector<std::string> entry, env_kv;
  std::string name_space;  // yard submit --namespace
  sched::LogTarget log_target;  // yard logs --actor | --task
  bool no_wait = false;
  std::string working_dir, job_id;
  std::string team;  // yard team-credential TEAM
  bool follow = false;
  std::string drain_node;
  double drain_timeout = 600, drain_deadline = 0;
  bool drain_force = false;
  int max_retries = 0;
  std::string output;
  sched::ShapeArgs shape;
  sched::JobArgs job;
};

struct Commands {
  CLI::App *start, *stop, *status, *submit, *jobs, *job, *team_credential, *logs, *stop_job, *drain, *metrics_targets, *timeline, *dashboard;
};

Commands define_start(CLI::App& app, Args& a, Commands c) {
  c.start = app.add_subcommand("start", "start a head node, or a node that joins a head (--address)");
  auto* s = c.start;
  s->add_flag("--head", a.head, "start the head: Redis, the head service and this node's node manager");
  s->add_option("--address", a.join, "join the cluster whose head is at host:port (token: --token, YARD_TOKEN, or the local head's file)");
  s->add_flag("--standby", a.standby,
              "with --head and --address ACTIVE: a standby head, which takes the cluster over by itself when the "
              "active head dies or is cut off (its lease in the control store runs out)");
  s->add_option("--team-key", a.dopts.team_key_file,
                 "with --head: the team key (what team credentials derive from) from this file, e.g. the active head "
                 "session's team.key for a standby on another machine");
  s->add_option("--token", a.token, "cluster token when joining");
  s->add_option("--heartbeat-timeout", a.dopts.heartbeat_timeout_s,
                "seconds without a heartbeat after which a node is dead (or YARD_HEARTBEAT_TIMEOUT)")
      ->default_val(4)->envname("YARD_HEARTBEAT_TIMEOUT")->check(CLI::Range(0.5, 600.0));
  s->add_option("--head-timeout", a.dopts.head_timeout_s,
                "a node that cannot reach the cluster's control store this many seconds stops itself and its workers "
                "(0: never)")
      ->default_val(60)->check(CLI::Range(0.0, 86400.0));
  s->add_option("--port", a.dopts.port, "port the head listens on (0: any free port)")->default_val(6380);
  s->add_option("--host", a.dopts.host, "interface to listen on")->default_val("127.0.0.1");
  s->add_option("--redis-address", a.dopts.redis_address,
                "use this Redis (host:port, or sentinel:HOST:PORT,.../NAME for a primary its Sentinels name) instead "
                "of starting one; password from YARD_REDIS_PASSWORD");
  s->add_option("--control-replicas", a.dopts.control_replicas,
                "with --head: keep the control store on a primary and this many replicas, watched by three Sentinels "
                "that promote a replica when the primary is lost (0: one Redis)")
      ->check(CLI::Range(0, 5));
  s->add_option("--num-cpus", a.dopts.num_cpus, "CPUs this node offers (default: all)");
  s->add_option("--num-gpus", a.dopts.num_gpus, "GPUs this node offers (default: its NVIDIA devices)");
  s->add_option("--object-store-memory", a.dopts.object_store_bytes,
                "bytes of objects this node's processes keep in memory before spilling the least recently used "
                "to disk, e.g. 2GB (default: 30% of the machine's memory)")
      ->transform(CLI::AsSizeValue(false));
  s->add_option("--metrics-port", a.dopts.metrics_port,
                "serve Prometheus metrics on this port of --host (0: any free port; the head's node manager "
                "uses the next port); `yard metrics-targets` lists every endpoint")
      ->check(CLI::Range(0, 65535));
  s->add_option("--dashboard-port", a.dopts.dashboard_port,
                "the head's dashboard on this port of --host (default: any free port; -1: none); "
                "`yard dashboard` prints its address")
      ->check(CLI::Range(-1, 65535));
  s->add_option("--resources", a.resources_json, "custom resources as JSON, e.g. '{\"disk\": 2}'");
  s->add_option("--simulate", a.dopts.simulate,
                 "with --address: join this many simulated nodes, run in this one process (actors placed on them are "
                 "answered here; for measuring a large cluster's head)")
      ->check(CLI::Range(1, 100000));
  s->add_option("--autoscaler", a.dopts.autoscaler_config,
                 "with --head: start and stop nodes for the demand, as this TOML file says (node types, "
                 "min/max nodes, idle timeout, provider local or slurm)");
  s->add_option("--config", a.dopts.cluster_config,
                 "with --head: the cluster's configuration (TOML): the job queue's teams, quotas and starvation "
                 "bound, and node types when it also autoscales (docs/operations.md)");
  s->add_option("--node-id", a.dopts.node_id, "the id this node joins as (internal: the autoscaler's providers)")
      ->group("");
  s->add_flag("--block", a.block, "stay in the foreground");
  s->add_flag("--embedded", a.dopts.embedded, "started by yard::init() (internal)")->group("");
  s->add_flag("--head-node", a.dopts.head_node, "the node manager beside the head service (internal)")->group("");
  s->add_option("--session-dir", a.dopts.session_dir, "session directory (internal)")->group("");
  s->add_option("--ready-fd", a.dopts.ready_fd, "fd to report readiness on (internal)")->group("");
  return c;
}

Commands define_cli(CLI::App& app, Args& a) {
  app.require_subcommand(1);
  auto add_conn = [&](CLI::App* sc) {
    sc->add_option("--address", a.address, "head address host:port (default: YARD_ADDRESS, else the latest local head)");
    sc->add_option("--token", a.token, "cluster token (default: YARD_TOKEN, else the local session's token file)");
    return sc;
  };
  Commands c = define_start(app, a, {});
  c.stop = add_conn(app.add_subcommand("stop", "stop the cluster: the head, its Redis, workers and jobs"));
  c.status = add_conn(app.add_subcommand("status", "nodes, resources used/total, actors and jobs"));
  c.status->add_flag("--json", a.as_json, "print every node, actor, group and job as JSON");
  c.status->add_flag("-v,--verbose", a.verbose, "list every node, actor, group and job (by default a large cluster is summarised)");
  c.metrics_targets = add_conn(app.add_subcommand(
      "metrics-targets", "the cluster's Prometheus endpoints as a file_sd_configs file (scrape them with basic_auth: "
                         "username yard, password_file the session's web_key file)"));
  c.metrics_targets->add_option("-o,--output", a.output, "write the file here (atomically) instead of printing it");
  c.dashboard = add_conn(app.add_subcommand("dashboard", "the address of the head's dashboard, with the cluster's web key"));
  c.timeline = add_conn(app.add_subcommand(
      "timeline", "a job's tasks, actor calls and lease waits as a Chrome trace (Perfetto, chrome://tracing)"));
  c.timeline->add_option("job", a.job_id, "job id (default: the latest job)");
  c.timeline->add_option("-o,--output", a.output, "write the trace here instead of printing it");
  c.submit = add_conn(app.add_subcommand("submit", "run a program as a job on the cluster, streaming its output"));
  c.submit->add_flag("--no-wait", a.no_wait, "print the job id and return at once");
  // One value per --env (repeat it), so that a `--` after it still starts the program's arguments.
  c.submit->add_option("--env", a.env_kv, "extra KEY=VALUE for the job's environment; repeat it")->allow_extra_args(false);
  c.submit->add_option("--namespace", a.name_space,
                       "where the job's actor and placement-group names live (YARD_NAMESPACE); jobs that share "
                       "detached actors by name give the same one (default: the job's own)");
  c.submit->add_option("--max-retries", a.max_retries,
                       "run the program again, up to this many times, when its process dies by a signal (a crash, "
                       "kill -9, the OOM killer); YARD_JOB_ATTEMPT tells it which attempt it is")
      ->default_val(0)
      ->check(CLI::Range(0, 100));
  c.submit->add_option("--working-dir", a.working_dir,
                       "upload this directory; the job and its workers on every node run in a copy of it")
      ->check(CLI::ExistingDirectory);
  sched::add_shape_options(c.submit, a.shape);
  c.submit->add_option("entrypoint", a.entry, "program and arguments, after --")->required();
  c.jobs = add_conn(app.add_subcommand("jobs", "list jobs, and why each queued job waits"));
  c.jobs->add_flag("--json", a.as_json, "every job's fields as JSON");
  c.job = add_conn(sched::define_job_command(app, a.job));
  c.team_credential = app.add_subcommand("team-credential", "print a team's credential (on the head's machine; give it to the team)");
  c.team_credential->add_option("team", a.team, "the team's name in the cluster's configuration")->required();
  c.logs = add_conn(app.add_subcommand("logs", "print a job's output, or what an actor's or a task's code logged"));
  c.logs->add_option("job", a.job_id, "job id");
  c.logs->add_flag("-f,--follow", a.follow, "keep printing until the job ends");
  c.logs->add_option("--actor", a.log_target.actor, "an actor's lines (yard::log), by id or name, from every live node");
  c.logs->add_option("--namespace", a.log_target.name_space, "the namespace of the --actor name");
  c.logs->add_option("--task", a.log_target.task, "a task's lines (yard::log), by its result's ObjectRef id");
  c.logs->add_option("-n,--lines", a.log_target.max_lines, "the newest this many lines per node")->default_val(1000);
  c.stop_job = add_conn(app.add_subcommand("stop-job", "stop a running job"));
  c.stop_job->add_option("job", a.job_id, "job id")->required();
  c.drain = add_conn(app.add_subcommand("drain", "take a node out of the cluster without failures: no new work goes "
                                                 "there, restartable actors move, the rest is waited for, then it stops"));
  c.drain->add_option("node", a.drain_node, "node id (as yard status shows it)")->required();
  c.drain->add_option("--timeout", a.drain_timeout, "seconds to wait for its work to finish")->default_val(600)
      ->check(CLI::Range(0.0, 86400.0));
  auto* force = c.drain->add_flag("--force", a.drain_force, "at the timeout, stop what still runs there");
  c.drain->add_option("--deadline", a.drain_deadline,
                      "a notice (a spot node being reclaimed): the node goes in SECONDS whatever runs there; elastic "
                      "replicas leave at a step boundary, and queued jobs that cannot shrink or move off it commit a "
                      "checkpoint 10 s before and are requeued")
      ->check(CLI::Range(1.0, 86400.0))
      ->excludes(c.drain->get_option("--timeout"))
      ->excludes(force);
  return c;
}

int cmd_start(Args& a) {
  if (a.standby && (!a.head || a.join.empty())) {
    std::cerr << "yard: a standby head is started with --head --standby --address ACTIVE_HEAD:PORT\n";
    return 2;
  }
  if (!a.dopts.team_key_file.empty()) {
    if (!a.head) {
      std::cerr << "yard: --team-key is a head's: give it with --head\n";
      return 2;
    }
    try {
      sched::given_team_key(a.dopts.team_key_file);
    } catch (const std::exception& e) {
      std::cerr << "yard: " << e.what() << "\n";
      return 2;
    }
  }
  if (a.standby) {
    auto ep = detail::resolve_endpoint(a.join, a.token);
    a.dopts.standby_of = ep.address;
    a.dopts.join_token = ep.token;
    a.join.clear();
  }
  if (a.head == !a.join.empty()) {
    std::cerr << "yard: say either --head (start a cluster) or --address HEAD:PORT (join one)\n";
    return 2;
  }
  if (a.dopts.simulate > 0 && a.join.empty()) {
    std::cerr << "yard: --simulate joins simulated nodes to a running head: give --address HEAD:PORT\n";
    return 2;
  }
  if (!a.dopts.autoscaler_config.empty() && !a.dopts.cluster_config.empty()) {
    std::cerr << "yard: give the cluster's configuration once: --config FILE (with [node_types] it also autoscales) "
                 "or --autoscaler FILE\n";
    return 2;
  }
  for (auto* file : {&a.dopts.autoscaler_config, &a.dopts.cluster_config}) {
    if (file->empty()) continue;
    bool autoscaler = file == &a.dopts.autoscaler_config;
    if (!a.head) {
      std::cerr << "yard: " << (autoscaler ? "--autoscaler" : "--config") << " belongs to the head (yard start --head "
                << (autoscaler ? "--autoscaler" : "--config") << " FILE)\n";
      return 2;
    }
    *file = std::filesystem::absolute(*file).string();
    auto c = sched::read_autoscale_config(*file, autoscaler);
    if (!c) {
      std::cerr << "yard: " << c.why() << "\n";
      return 2;
    }
    // A file with node types autoscales, whichever option gave it.
    if (!autoscaler && !c.value().types.empty()) std::swap(a.dopts.autoscaler_config, a.dopts.cluster_config);
  }
  if (!a.dopts.node_id.empty()) {
    bool plain = a.dopts.node_id.size() <= 64 && std::all_of(a.dopts.node_id.begin(), a.dopts.node_id.end(), [](char ch) {
      return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
    });
    if (!plain || a.join.empty()) {
      std::cerr << "yard: --node-id is up to 64 of a-z, 0-9, - and _, for a node that joins (--address)\n";
      return 2;
    }
  }
  if (!a.join.empty()) {
    auto ep = detail::resolve_endpoint(a.join, a.token);
    a.dopts.join_address = ep.address;
    a.dopts.join_token = ep.token;
    if (a.dopts.port == 6380) a.dopts.port = 0;  // the head's default port is not this node's
  }
  if (!a.resources_json.empty()) {
    try {
      auto r = json::parse(a.resources_json);
      for (auto& [k, v] : r.items()) a.dopts.resources[k] = v.get<double>();
    } catch (const std::exception& e) {
      std::cerr << "yard: --resources is not a JSON object of numbers: " << e.what() << "\n";
      return 2;
    }
  }
  if (a.block) signal(SIGINT, SIG_DFL);
  return start(a.dopts, a.block);
}

int cmd_submit(const Args& a) {
  auto c = connect(a.address, a.token);
  std::string wd_digest;
  if (!a.working_dir.empty()) wd_digest = upload_dir(c, a.working_dir);
  char cwd[4096];
  std::string wd = getcwd(cwd, sizeof cwd) ? cwd : ".";
  auto r = c.call([&](auto env) {
    auto sj = env.getBody().initSubmitJob();
    auto ep = sj.initEntrypoint(static_cast<unsigned>(a.entry.size()));
    for (unsigned i = 0; i < a.entry.size(); ++i) ep.set(i, a.entry[i]);
    sj.setCwd(wd);
    sj.setWorkingDir(wd_digest);
    sj.setMaxRetries(a.max_retries);
    sched::set_shape(sj, a.shape);
    auto env_kv = a.env_kv;
    if (!a.name_space.empty()) env_kv.push_back("YARD_NAMESPACE=" + a.name_space);
    auto e = sj.initEnv(static_cast<unsigned>(env_kv.size()));
    for (unsigned i = 0; i < env_kv.size(); ++i) e.set(i, env_kv[i]);
  });
  auto info = r->env().getBody().getJobInfo();
  std::string id = info.getJobId();
  std::cerr << "yard: submitted " << id;
  if (info.getStatus() == "QUEUED")
    std::cerr << " (queued: " << info.getWaitReason().cStr()
              << (info.getWaitDetail().size() ? std::string(": ") + info.getWaitDetail().cStr() : std::string()) << ")";
  std::cerr << "\n";
  if (a.no_wait) {
    std::cout << id << "\n";
    return 0;
  }
  int code = follow_logs(c, id, true);
  std::cerr << "yard: " << id << " finished with exit code " << code << "\n";
  return code;
}

int cmd_jobs(const Args& a) {
  auto c = connect(a.address, a.token);
  return sched::list_jobs(c, a.as_json);
}

int cmd_drain(const Args& a) {
  auto c = connect(a.address, a.token);
  bool notice = a.drain_deadline > 0;
  double timeout = notice ? a.drain_deadline : a.drain_timeout;
  std::cout << "Draining " << a.drain_node << (notice ? fmt::format(" (it goes in {:g} s)", timeout) : "") << " ..." << std::flush;
  auto t0 = std::chrono::steady_clock::now();
  c.call(
      [&](auto env) {
        auto d = env.getBody().initDrainNode();
        d.setNodeId(a.drain_node);
        d.setTimeoutMs(static_cast<uint32_t>(timeout * 1000));
        d.setForce(a.drain_force || notice);
        d.setNotice(notice);
      },
      std::chrono::milliseconds(static_cast<long>(timeout * 1000) + 30000));
  std::cout << " drained in "
            << fmt::format("{:.1f}", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
            << " s; it has left the cluster\n";
  return 0;
}

int cmd_stop_job(const Args& a) {
  auto c = connect(a.address, a.token);
  c.call([&](auto env) { env.getBody().setStopJob(a.job_id); });
  std::cout << "Stopping " << a.job_id << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Switchyard: a task/actor framework for distributed training.", "yard"};
  Args a;
  Commands c = define_cli(app, a);
  CLI11_PARSE(app, argc, argv);
  signal(SIGINT, [](int) { g_interrupted.store(true); });
  try {
    if (c.start->parsed()) return cmd_start(a);
    if (c.stop->parsed()) return sched::stop_cluster(a.address, a.token);
    if (c.status->parsed()) return sched::status_command(a.address, a.token, a.as_json, a.verbose);
    if (c.submit->parsed()) return cmd_submit(a);
    if (c.jobs->parsed()) return cmd_jobs(a);
    if (c.team_credential->parsed()) return sched::print_team_credential(a.team);
    if (c.job->parsed()) {
      auto conn = connect(a.address, a.token);
      return sched::job_command(conn, a.job);
    }
    if (c.logs->parsed()) {
      int given = !a.job_id.empty() + !a.log_target.actor.empty() + !a.log_target.task.empty();
      if (given != 1) {
        std::cerr << "yard: say one of: a job id, --actor NAME_OR_ID, --task ID\n";
        return 2;
      }
      if (a.job_id.empty()) return sched::print_target_logs(a.address, a.token, a.log_target);
      auto conn = connect(a.address, a.token);
      int code = follow_logs(conn, a.job_id, a.follow);
      return a.follow ? code : 0;
    }
    if (c.drain->parsed()) return cmd_drain(a);
    if (c.dashboard->parsed()) return dashboard(a.address, a.token);
    if (c.timeline->parsed()) return timeline(a.address, a.token, a.job_id, a.output);
    if (c.metrics_targets->parsed()) return metrics_targets(a.address, a.token, a.output);
    if (c.stop_job->parsed()) return cmd_stop_job(a);
  } catch (const std::exception& e) {
    std::cerr << "yard: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
