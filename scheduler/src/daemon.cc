#include "daemon_impl.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <set>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <kj/exception.h>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "io_loop.h"
#include "policy/leases.h"
#include "process.h"
#include "redis_client.h"
#include "session.h"
#include "shm_store.h"
#include "yard/errors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace yard::sched {

using namespace detail;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

std::string res_json(const std::map<std::string, double>& m) { return json(m).dump(); }

// Removes the shared-memory segments a (dead) worker left behind.
void remove_worker_segments(pid_t pid) {
  std::string prefix = ShmPool::prefix_for(pid).substr(1);  // without the leading '/'
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/dev/shm", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
  }
}

}  // namespace

// ---- start-up ---------------------------------------------------------------------------------

// A head started where a killed head left its cluster (same address, its Redis still up) takes
// the cluster over instead of starting a new one: the address and pid of that Redis, or nullopt.
std::optional<Daemon::Takeover> Daemon::find_takeover() {
  if (!o_.join_address.empty() || !o_.redis_address.empty() || o_.embedded || o_.port == 0) return std::nullopt;
  auto rec = record_for(o_.host + ":" + std::to_string(o_.port));
  if (!rec || !process_dead(rec->pid)) return std::nullopt;
  std::ifstream f(rec->session_dir + "/redis.address");
  std::string addr;
  long rpid = 0;
  if (!(f >> addr >> rpid)) return std::nullopt;
  try {
    auto [rh, rp] = split_address(addr);
    Redis probe(rh, rp, read_token(rec->token_file), std::chrono::milliseconds(500));
  } catch (const std::exception&) {
    return std::nullopt;  // its Redis is gone too: a new cluster
  }
  o_.session_dir = rec->session_dir;
  return Takeover{addr, static_cast<pid_t>(rpid)};
}

// The session's folders, the log, the cluster token and this node's id.
void Daemon::open_session(bool joining, bool taking_over) {
  if (o_.session_dir.empty())
    o_.session_dir = yard_home() + "/session-" + std::to_string(static_cast<long>(start_time_)) + "-" + random_hex(3);
  log_dir_ = o_.session_dir + "/logs";
  fs::create_directories(log_dir_);
  fs::create_directories(o_.session_dir + "/redis");
  auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_dir_ + (joining ? "/node.log" : "/head.log"));
  auto logger = std::make_shared<spdlog::logger>(joining ? "node" : "head", spdlog::sinks_init_list{file_sink});
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  token_file_ = o_.session_dir + "/token";
  if (joining) {
    token_ = o_.join_token;
    int fd = ::open(token_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw Error("cannot write " + token_file_);
    (void)!::write(fd, token_.data(), token_.size());
    ::close(fd);
  } else if (taking_over) {
    token_ = read_token(token_file_);
  } else {
    token_ = create_token(token_file_);
  }
  node_id_ = "node-" + random_hex(4);
  if (const char* pp = getenv("YARD_PARENT_PID")) parent_pid_ = atoi(pp);
}

// What this node offers: CPUs, memory, GPUs (its NVIDIA devices unless told) and custom resources.
void Daemon::measure_resources() {
  double cpus = o_.num_cpus > 0 ? o_.num_cpus : std::max(1u, std::thread::hardware_concurrency());
  total_ = o_.resources;
  total_["CPU"] = cpus;
  total_["memory"] = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  int gpus = o_.num_gpus;
  if (gpus < 0) {
    gpus = 0;
    std::error_code ec;
    for (auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) (void)e, ++gpus;
  }
  if (gpus > 0) total_["GPU"] = gpus;
  gpu_free_.assign(static_cast<size_t>(gpus), 1.0);
  for (auto& [k, v] : o_.resources)
    if (!(v >= 0) || !std::isfinite(v)) throw Error("resource " + k + " has a bad amount");
}

// A head's own redis-server: loopback (and the head's interface when it listens beyond this
// machine), append-only, the cluster token as its password; the head reaches it by Unix socket.
void Daemon::start_redis() {
  int rport = free_port("127.0.0.1");
  SpawnOptions so;
  // A standalone head's Redis outlives the head (a restarted head takes the cluster over);
  // `yard stop` stops it. An embedded cluster's dies with its program.
  so.death_signal = o_.embedded ? SIGTERM : 0;
  so.new_process_group = !o_.embedded;
  so.stdout_path = log_dir_ + "/redis.log";
  // Loopback always; the head's interface too when it listens beyond this machine, so other
  // nodes reach the control store (which asks for the cluster token).
  std::vector<std::string> argv{which("redis-server"), "--port", std::to_string(rport), "--bind"};
  if (o_.host == "0.0.0.0") {
    argv.push_back("0.0.0.0");
  } else {
    argv.push_back("127.0.0.1");
    if (o_.host != "127.0.0.1" && o_.host != "localhost") argv.push_back(o_.host);
  }
  std::string sock = o_.session_dir + "/redis/redis.sock";
  argv.insert(argv.end(), {"--dir", o_.session_dir + "/redis", "--appendonly", "yes", "--save", "",
                           "--requirepass", token_, "--daemonize", "no", "--protected-mode", "yes"});
  if (sock.size() < 100) argv.insert(argv.end(), {"--unixsocket", sock, "--unixsocketperm", "700"});
  redis_pid_ = spawn(argv, so);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!redis_) {
    try {
      // The head is on Redis's machine: its own connection goes through the Unix socket.
      if (sock.size() < 100)
        redis_ = std::make_unique<Redis>(sock, token_, std::chrono::milliseconds(500));
      else
        redis_ = std::make_unique<Redis>("127.0.0.1", rport, token_, std::chrono::milliseconds(500));
    } catch (const Error& e) {
      if (Clock::now() > deadline || !pid_alive(redis_pid_))
        throw ConnectionError(std::string("redis-server did not start (see ") + log_dir_ + "/redis.log): " + e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  bool wide = o_.host != "127.0.0.1" && o_.host != "localhost" && o_.host != "0.0.0.0";
  o_.redis_address = (wide ? o_.host : std::string("127.0.0.1")) + ":" + std::to_string(rport);
  std::ofstream(o_.session_dir + "/redis.address") << o_.redis_address << " " << redis_pid_ << "\n";
  redis_password_ = token_;
}

// The control store: the head's (asked of the head when joining), the one a killed head left, a
// new one of this head's own, or the one named by --redis-address.
void Daemon::connect_control_store(bool joining, const std::optional<Takeover>& takeover) {
  if (joining) {
    // The head says where the control store is; a wrong token is refused here, clearly.
    uint64_t rid = io_->next_request_id();
    OutMessage m(token_, rid, false);
    m.env().getBody().setGetControlStore();
    std::unique_ptr<InMessage> r;
    try {
      r = io_->call(o_.join_address, m, rid, std::chrono::seconds(10));
    } catch (const std::exception& e) {
      throw ConnectionError("cannot reach the head at " + o_.join_address + ": " + e.what());
    }
    auto body = r->env().getBody();
    if (body.isError()) throw AuthError("the head at " + o_.join_address + " refused this node: " + describe(body.getError()));
    o_.redis_address = body.getControlStore().getAddress();
    redis_password_ = body.getControlStore().getPassword();
    // A head that listens everywhere names its Redis by loopback: reach it where the head is.
    auto [jh, jp] = split_address(o_.join_address);
    auto [sh, sp] = split_address(o_.redis_address);
    if ((sh == "127.0.0.1" || sh == "0.0.0.0") && jh != "127.0.0.1" && jh != "localhost")
      o_.redis_address = jh + ":" + std::to_string(sp);
    auto [rh, rp] = split_address(o_.redis_address);
    redis_ = std::make_unique<Redis>(rh, rp, redis_password_, std::chrono::seconds(3));
  } else if (takeover) {
    auto [rh, rp] = split_address(takeover->redis_address);
    redis_ = std::make_unique<Redis>(rh, rp, token_, std::chrono::seconds(3));
    o_.redis_address = takeover->redis_address;
    redis_password_ = token_;
    redis_pid_ = takeover->redis_pid;
    redis_owned_ = false;
    spdlog::warn("taking over the cluster of session {}: its head is gone, its Redis at {} is up", o_.session_dir,
                 takeover->redis_address);
  } else if (o_.redis_address.empty()) {
    start_redis();
  } else {
    auto [rh, rp] = split_address(o_.redis_address);
    const char* pw = getenv("YARD_REDIS_PASSWORD");
    redis_password_ = pw ? pw : "";
    redis_ = std::make_unique<Redis>(rh, rp, redis_password_, std::chrono::seconds(3));
  }
  tables_ = std::make_unique<store::Tables>(*redis_);
}

// Rebuilds a taken-over cluster, joins the membership and starts the timers.
void Daemon::begin_serving(bool joining) {
  if (recovered_) {
    // State is rebuilt on the loop thread before any request is served (requests arriving
    // meanwhile are answered "unavailable, retry").
    std::promise<void> built;
    auto fut = built.get_future();
    io_->post([this, &built] {
      try {
        rebuild();
      } catch (const std::exception& e) {
        spdlog::error("rebuilding the cluster state from Redis: {}", e.what());
      }
      built.set_value();
    });
    fut.wait();
  }
  serving_.store(true);
  if (!joining) tables_->put_cluster(io_->address(), o_.session_dir, log_dir_, start_time_, node_id_);
  // Resources and the heartbeat first, then the membership: the failure detector never sees a
  // member without a heartbeat, and the scheduler never sees one without resources.
  register_resources(*redis_, node_id_, total_);
  avail_ = total_;
  save_node();
  tables_->add_node(node_id_, joining ? "node" : "head");
  io_->post([this] { io_->every(std::chrono::milliseconds(50), [this] { periodic(); }); });
  auto beat = std::chrono::milliseconds(std::max<long>(100, static_cast<long>(o_.heartbeat_timeout_s * 250)));
  io_->post([this, beat] { io_->every(beat, [this] { save_node(); }); });
  if (!joining) {
    io_->post([this] {
      refresh_nodes();
      io_->every(std::chrono::milliseconds(250), [this] { check_nodes(); });
    });
  }
}

// Until SIGTERM, SIGINT or SIGHUP, or until the process that started this one is gone.
void Daemon::wait_for_stop() {
  while (!g_stop.load()) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    timespec ts{0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      spdlog::info("signal {}: shutting down", sig);
      return;
    }
    if (parent_pid_ && kill(parent_pid_, 0) != 0) {
      spdlog::info("parent {} is gone: shutting down", parent_pid_);
      return;
    }
  }
}

int Daemon::run() {
  auto ready = [&](const std::string& line) {
    if (o_.ready_fd >= 0) {
      std::string l = line + "\n";
      (void)!write(o_.ready_fd, l.data(), l.size());
      close(o_.ready_fd);
      o_.ready_fd = -1;
    }
  };
  try {
    start_time_ = unix_time();
    auto takeover = find_takeover();
    bool joining = !o_.join_address.empty();
    head_ = !joining;
    open_session(joining, takeover.has_value());
    measure_resources();
    // Listen first: a busy port is the most common start-up error and should fail fast.
    io_ = std::make_unique<IoLoop>(o_.host, o_.port, token_, [this](IoLoop::Incoming in) { handle(std::move(in)); });
    connect_control_store(joining, takeover);
    recovered_ = takeover.has_value();
    begin_serving(joining);

    ClusterRecord rec{io_->address(), o_.session_dir, log_dir_, token_file_, getpid()};
    if (!o_.embedded) write_record(rec, !joining);
    spdlog::info("{} {} listening on {}, redis at {}, {} CPUs, session {}", joining ? "node" : "head", node_id_,
                 io_->address(), o_.redis_address, total_["CPU"], o_.session_dir);
    ready(io_->address() + " " + token_file_);
    wait_for_stop();

    std::promise<void> done;
    auto f = done.get_future();
    io_->post([this, &done] {
      shutdown_all();
      done.set_value();
    });
    f.wait_for(std::chrono::seconds(10));
    io_->stop();
    if (!o_.embedded) remove_record(rec);
    if (redis_pid_) terminate(redis_pid_, SIGTERM, std::chrono::seconds(5));
    spdlog::info("stopped");
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    ready(std::string("ERROR: ") + e.what());
    fprintf(stderr, "yard: %s\n", e.what());
    if (redis_pid_ && redis_owned_) terminate(redis_pid_, SIGTERM, std::chrono::seconds(5));
    return 1;
  }
}

void Daemon::save_node() {
  try {
    if (!head_ && redis_->cmd({"EXISTS", avail_key(node_id_)}).integer() == 0 && !fenced_) {
      // The head declared this node dead (it was cut off too long) and moved its actors away:
      // what still runs here is stale. Stop it, and come back as an empty node.
      spdlog::warn("this node was declared dead while it was silent: stopping its workers and rejoining");
      fenced_ = true;
      for (auto& [id, w] : workers_) kill(w.pid, SIGKILL);
    }
    if (fenced_ && workers_.empty()) {
      register_resources(*redis_, node_id_, total_);
      avail_ = total_;
      fenced_ = false;
    }
    if (!fenced_) refresh_local();
    refresh_peers_view();
    store::NodeReport r;
    r.address = io_->address();
    r.hostname = hostname();
    r.pid = getpid();
    r.log_dir = log_dir_;
    r.leased = std::count_if(workers_.begin(), workers_.end(), [](auto& kv) { return kv.second.state == WState::kLeased; });
    r.start_time = start_time_;
    r.now = unix_time();
    r.workers = static_cast<long>(workers_.size());
    tables_->report(node_id_, r, std::chrono::milliseconds(static_cast<long>(o_.heartbeat_timeout_s * 1000)));
  } catch (const std::exception& e) {
    spdlog::error("cannot update the node record: {}", e.what());
  }
}

void Daemon::shutdown_all() {
  if (head_) flush_releases();
  for (auto& [id, w] : workers_) kill(w.pid, SIGKILL);
  for (auto& [id, j] : jobs_)
    if (j.proc_pid && !j.ended) kill(-j.proc_pid, SIGTERM);
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline) {
    bool any = false;
    for (auto& [id, w] : workers_) any |= pid_alive(w.pid);
    for (auto& [id, j] : jobs_) if (j.proc_pid && !j.ended) any |= pid_alive(j.proc_pid);
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& [id, w] : workers_) remove_worker_segments(w.pid);
  for (auto& [id, j] : jobs_)
    if (j.proc_pid && !j.ended) {
      kill(-j.proc_pid, SIGKILL);
      if (j.status == store::JobStatus::kRunning) {
        j.status = store::JobStatus::kStopped;
        j.end = unix_time();
        try { save_job(j); } catch (...) {}
      }
    }
  try {
    tables_->remove_node(node_id_);
  } catch (...) {
  }
}

// ---- requests ---------------------------------------------------------------------------------

void Daemon::handle(IoLoop::Incoming in) {
  using B = wire::Envelope::Body;
  auto body = in.msg->env().getBody();
  if (!serving_.load()) {
    reply_error(in, wire::ErrorCode::UNAVAILABLE, "the head is starting; retry");
    return;
  }
  try {
    switch (body.which()) {
      case B::PING: reply_ok(in); return;
      case B::REGISTER_WORKER: on_register_worker(in); return;
      case B::REQUEST_LEASE: on_request_lease(in); return;
      case B::RETURN_LEASE: on_return_lease(in); return;
      case B::HOST_ACTOR: on_host_actor(in); return;
      case B::KILL_HOSTED: on_kill_hosted(in); return;
      case B::SHUTDOWN:
        spdlog::info("shutdown requested");
        reply_ok(in);
        g_stop.store(true);
        return;
      default: break;
    }
    if (!head_) {
      reply_error(in, wire::ErrorCode::BAD_REQUEST,
                  "this is a node manager, not the head: send this request to the cluster's head");
      return;
    }
    switch (body.which()) {
      case B::REGISTER_JOB: on_register_job(in); return;
      case B::KILL_ACTOR: on_kill_actor(in); return;
      case B::CREATE_ACTOR: on_create_actor(in); return;
      case B::GET_ACTOR: on_get_actor(in); return;
      case B::ACTOR_LOST: on_actor_lost(in); return;
      case B::CREATE_PLACEMENT_GROUP: on_create_pg(in); return;
      case B::WAIT_PLACEMENT_GROUP: on_wait_pg(in); return;
      case B::REMOVE_PLACEMENT_GROUP: on_remove_pg(in); return;
      case B::HAS_BLOB:
      case B::PUT_BLOB:
      case B::GET_BLOB: on_blob(in); return;
      case B::DRAIN_NODE: on_drain(in); return;
      case B::SUBMIT_JOB: on_submit_job(in); return;
      case B::JOB_LOGS: on_job_logs(in); return;
      case B::STOP_JOB: on_stop_job(in); return;
      case B::STATUS: on_status(in); return;
      case B::GET_CONTROL_STORE: on_get_control_store(in); return;
      case B::LIST_JOBS: on_list_jobs(in); return;
      case B::FINISH_JOB: on_finish_job(in); return;
      default:
        reply_error(in, wire::ErrorCode::BAD_REQUEST, "the head does not serve this request");
    }
  } catch (const kj::Exception& e) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, std::string("malformed request: ") + e.getDescription().cStr());
  } catch (const DecodeError& e) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, e.what());
  } catch (const ConnectionError& e) {
    spdlog::error("request failed: {}", e.what());
    reply_error(in, wire::ErrorCode::UNAVAILABLE, std::string("the control store is unreachable; retry: ") + e.what());
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    reply_error(in, wire::ErrorCode::INTERNAL, e.what());
  }
}

void Daemon::on_get_control_store(IoLoop::Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto cs = m.env().getBody().initControlStore();
  cs.setAddress(o_.redis_address);
  cs.setPassword(redis_password_);
  io_->reply(in.routing_id, m.finish());
}

void Daemon::on_list_jobs(IoLoop::Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  std::vector<store::JobRecord> jobs;
  for (auto& id : tables_->job_ids())
    if (auto j = tables_->job(id)) jobs.push_back(std::move(*j));
  auto list = m.env().getBody().initJobList(static_cast<unsigned>(jobs.size()));
  for (unsigned i = 0; i < jobs.size(); ++i) {
    list[i].setJobId(jobs[i].id);
    list[i].setEntrypoint(jobs[i].entrypoint);
    list[i].setStatus(store::name(jobs[i].status));
    list[i].setExitCode(jobs[i].exit_code);
    list[i].setStartTime(jobs[i].start);
    list[i].setEndTime(jobs[i].end);
    list[i].setLogPath(jobs[i].log_path);
  }
  io_->reply(in.routing_id, m.finish());
}

// A driver says its job is done (a submitted job ends when its process exits instead).
void Daemon::on_finish_job(IoLoop::Incoming& in) {
  auto it = jobs_.find(in.msg->env().getBody().getFinishJob());
  if (it != jobs_.end() && !it->second.submitted) end_job(it->second, store::JobStatus::kSucceeded, 0);
  else if (it != jobs_.end()) end_job(it->second, std::nullopt, 0);
  reply_ok(in);
}

void Daemon::reply_ok(IoLoop::Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setOk();
  io_->reply(in.routing_id, m.finish());
}

void Daemon::reply_error(const std::string& routing, uint64_t req, wire::ErrorCode code, const std::string& msg) {
  OutMessage m(token_, req, true);
  set_error(m.env(), code, msg);
  io_->reply(routing, m.finish());
}

std::string Daemon::new_job_id() { return tables_->new_job_id(); }

void Daemon::save_job(const Job& j) {
  store::JobRecord r = j;
  r.node = node_id_;
  tables_->save_job(r);
}

void Daemon::on_register_job(IoLoop::Incoming& in) {
  auto rj = in.msg->env().getBody().getRegisterJob();
  std::string sub = rj.getSubmissionId();
  Job* j = nullptr;
  if (!sub.empty()) {
    auto it = jobs_.find(sub);
    if (it != jobs_.end()) j = &it->second;
  }
  if (!j) {
    std::string id = new_job_id();
    j = &jobs_[id];
    j->id = id;
    j->entrypoint = std::string(rj.getBinary()) + " (driver pid " + std::to_string(rj.getPid()) + ")";
    j->start = unix_time();
    tables_->add_job(id);
  }
  j->binary = rj.getBinary();
  j->digest = rj.getBinaryDigest();
  j->cwd = rj.getCwd();
  j->driver_pid = rj.getPid();
  save_job(*j);
  spdlog::info("job {} registered: driver pid {}, binary {}", j->id, j->driver_pid, j->binary);
  // Warm the pool: workers start while the driver gets going.
  int warm = std::min<int>(2, static_cast<int>(total_["CPU"]));
  for (int i = 0; i < warm; ++i) spawn_worker(j->id, "", 0);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto jr = m.env().getBody().initJobRegistered();
  jr.setJobId(j->id);
  jr.setNodeId(node_id_);
  jr.setNumCpus(total_["CPU"]);
  io_->reply(in.routing_id, m.finish());
}

std::string Daemon::spawn_worker(const std::string& job_id, const std::string& actor_id, uint64_t lease,
                                 uint32_t restarts, const std::vector<std::pair<int, double>>& gpus) {
  auto& j = jobs_.at(job_id);
  Worker w;
  w.id = "worker-" + random_hex(5);
  w.job_id = job_id;
  w.actor_id = actor_id;
  w.lease = lease;
  w.log = log_dir_ + "/" + w.id + ".log";
  SpawnOptions so;
  so.env = {{"YARD_WORKER", "1"}, {"YARD_NODE_ADDRESS", io_->address()}, {"YARD_TOKEN", token_},
            {"YARD_JOB_ID", job_id}, {"YARD_WORKER_ID", w.id}, {"YARD_ACTOR_ID", actor_id},
            {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"YARD_NODE_ID", node_id_},
            {"YARD_HEAD_ADDRESS", head_ ? io_->address() : o_.join_address},
            {"YARD_ACTOR_RESTARTS", std::to_string(restarts)}, {"YARD_NODE_HOST", o_.host}};
  // A worker sees exactly the devices it was given (none: an empty list hides them all).
  std::string visible;
  for (auto& [dev, share] : gpus) visible += (visible.empty() ? "" : ",") + std::to_string(dev);
  if (!gpu_free_.empty() || !gpus.empty()) so.env["CUDA_VISIBLE_DEVICES"] = visible;
  w.gpus = gpus;
  so.cwd = j.cwd;
  so.stdout_path = w.log;
  so.death_signal = SIGKILL;
  w.pid = spawn({j.binary}, so);
  worker_by_pid_[w.pid] = w.id;
  spdlog::info("started {} (pid {}) for job {}{}", w.id, w.pid, job_id, actor_id.empty() ? "" : " actor " + actor_id);
  std::string id = w.id;
  workers_.emplace(id, std::move(w));
  return id;
}

void Daemon::on_register_worker(IoLoop::Incoming& in) {
  auto rw = in.msg->env().getBody().getRegisterWorker();
  auto it = workers_.find(rw.getWorkerId());
  if (it == workers_.end()) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "unknown worker id");
    return;
  }
  auto& w = it->second;
  w.address = rw.getAddress();
  reply_ok(in);
  if (!w.actor_id.empty()) {
    if (!hosted_.count(w.actor_id)) {
      kill(w.pid, SIGKILL);
      return;
    }
    instantiate_hosted(w.actor_id, w);
    return;
  }
  if (w.lease) {
    auto l = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& x) { return x.seq == w.lease; });
    w.lease = 0;
    if (l != leases_.end()) {
      w.state = WState::kLeased;
      l->assigned.push_back(w.id);
      --l->starting;
      if (l->starting == 0) {
        answer_lease(*l);
        leases_.erase(l);
      }
      return;
    }
    give_held(w);
    w.held.clear();
  }
  w.state = WState::kIdle;
  process_leases();
}

void Daemon::on_request_lease(IoLoop::Incoming& in) {
  auto rl = in.msg->env().getBody().getRequestLease();
  Lease l;
  l.spilled = rl.getSpilled();
  l.no_wait = rl.getNoWait();
  l.node_id = rl.getNodeId();
  l.soft = rl.getSoft();
  l.spread = rl.getSpread();
  l.pg = rl.getPlacementGroup();
  l.bundle = rl.getBundleIndex();
  if (rl.getResources().size()) {
    l.need.clear();
    if (auto bad = read_resources(rl.getResources(), l.need)) return reply_error(in, wire::ErrorCode::BAD_REQUEST, *bad);
  }
  l.seq = ++lease_seq_;
  l.routing = in.routing_id;
  l.req = in.msg->env().getRequestId();
  l.job = rl.getJobId();
  l.count = std::max<uint32_t>(1, rl.getCount());
  l.deadline = Clock::now() + std::chrono::milliseconds(std::max<uint32_t>(1000, rl.getTimeoutMs()) - 500);
  // A job registered elsewhere (tasks spilled here) is looked up, its binary fetched if needed.
  with_job(l.job, [this, l](Result<Job*> j) mutable {
    if (!j) {
      reply_error(l.routing, l.req, wire::ErrorCode::NOT_FOUND, j.why());
      return;
    }
    leases_.push_back(std::move(l));
    process_leases();
  });
}

// Where a lease that cannot be served here now could be: the node (alive, not draining, not
// this one) with the most free CPUs, from the view refreshed with every heartbeat.
std::string Daemon::spill_target(const Res& need, bool ever) {
  try {
    refresh_peers_if_stale();
  } catch (const std::exception& e) {
    spdlog::error("reading the other nodes' resources: {}", e.what());
  }
  auto id = policy::spill_target(peers_, node_id_, need, ever);
  return id.empty() ? std::string() : peer_addresses_.at(id);
}

void Daemon::refresh_peers_view() {
  peers_view_at_ = Clock::now();
  peers_.nodes.clear();
  peer_addresses_.clear();
  for (auto& n : tables_->nodes_with_resources())
    if (n.state == store::NodeState::kAlive && !n.address.empty() && n.has_avail) {
      peer_addresses_[n.id] = n.address;
      peers_.nodes.push_back({n.id, std::move(n.total), std::move(n.avail), 0});
    }
}

void Daemon::refresh_peers_if_stale() {
  if (Clock::now() - peers_view_at_ > std::chrono::milliseconds(100)) refresh_peers_view();
}

void Daemon::answer_lease(Lease& l) {
  OutMessage m(token_, l.req, true);
  auto lg = m.env().getBody().initLeaseGranted();
  // Fewer than asked for: say where more could be had.
  if (l.assigned.size() < l.count && !l.spilled) {
    auto target = spill_target(l.need);
    if (!target.empty()) lg.setSpillback(target);
  }
  auto ws = lg.initWorkers(static_cast<unsigned>(l.assigned.size()));
  for (unsigned i = 0; i < l.assigned.size(); ++i) {
    auto& w = workers_.at(l.assigned[i]);
    ws[i].setWorkerId(w.id);
    ws[i].setAddress(w.address);
  }
  io_->reply(l.routing, m.finish());
}

void Daemon::process_leases() {
  for (auto it = leases_.begin(); it != leases_.end();) {
    bool done = it->pg.empty() ? serve_lease(*it) : serve_in_bundle(*it);
    it = done ? leases_.erase(it) : std::next(it);
  }
}

void Daemon::answer_spillback(const Lease& l, const std::string& address) {
  OutMessage m(token_, l.req, true);
  m.env().getBody().initLeaseGranted().setSpillback(address);
  io_->reply(l.routing, m.finish());
}

std::string Daemon::peer_address(const std::string& node) {
  refresh_peers_if_stale();
  auto p = peer_addresses_.find(node);
  return p == peer_addresses_.end() ? std::string() : p->second;
}

std::string Daemon::lease_worker(Lease& l, const std::vector<std::pair<int, double>>& devices) {
  bool gpu = !devices.empty();
  auto idle = gpu ? workers_.end() : std::find_if(workers_.begin(), workers_.end(), [&](auto& kv) {
    return kv.second.state == WState::kIdle && kv.second.job_id == l.job;
  });
  if (idle != workers_.end()) {
    idle->second.state = WState::kLeased;
    l.assigned.push_back(idle->first);
    return idle->first;
  }
  auto wid = spawn_worker(l.job, "", l.seq, 0, devices);
  workers_.at(wid).dedicated = gpu;
  ++l.starting;
  return wid;
}

// A lease inside a placement group: served by the bundle's node, from the bundle's resources.
bool Daemon::serve_in_bundle(Lease& l) {
  BundleRoute route;
  try {
    route = bundle_route(l);
  } catch (const std::exception& e) {
    spdlog::error("placing a lease in group {}: {}", l.pg, e.what());
  }
  switch (route.kind) {
    case BundleRoute::Kind::kWait: return false;
    case BundleRoute::Kind::kElsewhere: answer_spillback(l, route.address); return true;
    case BundleRoute::Kind::kInfeasible: reply_error(l.routing, l.req, wire::ErrorCode::INFEASIBLE, route.why); return true;
    case BundleRoute::Kind::kHere: break;
  }
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  std::string key = bundle_key(l.pg, l.bundle);
  while (l.assigned.size() + l.starting < l.count && reserve_bundle(*redis_, key, route.total, l.need)) {
    std::vector<std::pair<int, double>> devices;
    if (gpu > 0) {
      auto d = take_gpus(gpu);
      if (!d) {
        release_bundle(*redis_, key, l.need);
        break;
      }
      devices = *d;
    }
    std::string wid;
    try {
      wid = lease_worker(l, devices);
    } catch (const std::exception& e) {
      release_bundle(*redis_, key, l.need);
      give_gpus(devices);
      break;
    }
    workers_.at(wid).held = l.need;
    workers_.at(wid).bundle = key;
  }
  l.spilled = true;  // never sent elsewhere: the bundle is here
  if (l.starting == 0 && !l.assigned.empty()) {
    answer_lease(l);
    return true;
  }
  return false;
}

// Any other lease: routed first (affinity, SPREAD, a node that could never hold it), then served
// from this node's resources, spilled to a node with room, or kept waiting.
bool Daemon::serve_lease(Lease& l) {
  bool routed = !l.spilled && ((!l.node_id.empty() && l.node_id != node_id_) || l.spread);
  if (routed || !fits(l.need, total_)) refresh_peers_if_stale();  // only then does the route look at peers
  policy::LeaseRequest req{l.need, l.node_id, l.soft, l.spread, l.spilled};
  auto route = policy::route_lease(peers_, {node_id_, total_, avail_, 0}, req, spread_turn_);
  if (route.used_turn) ++spread_turn_;
  if (route.kind == policy::LeaseRoute::Kind::kInfeasible) {
    reply_error(l.routing, l.req, wire::ErrorCode::INFEASIBLE, route.why);
    return true;
  }
  if (route.kind == policy::LeaseRoute::Kind::kElsewhere) {
    answer_spillback(l, peer_addresses_.at(route.node));
    return true;
  }
  // Decided: served here (soft affinity to a gone node, SPREAD's turn here, hard affinity here).
  if (routed || (!l.node_id.empty() && !l.soft)) l.spilled = true;
  double gpu = l.need.count("GPU") ? l.need.at("GPU") : 0;
  while (l.assigned.size() + l.starting < l.count && take_local(l.need)) {
    std::vector<std::pair<int, double>> devices;
    if (gpu > 0) {
      auto d = take_gpus(gpu);
      if (!d) {  // the shares left are too fragmented for this request now
        give_local(l.need);
        break;
      }
      devices = *d;
    }
    try {
      workers_.at(lease_worker(l, devices)).held = l.need;
    } catch (const std::exception& e) {
      give_local(l.need);
      give_gpus(devices);
      reply_error(l.routing, l.req, wire::ErrorCode::INTERNAL, std::string("cannot start a worker: ") + e.what());
      return true;
    }
  }
  if (l.starting > 0) return false;
  if (!l.assigned.empty()) {
    answer_lease(l);  // fewer than asked for: it says where more could be had
    return true;
  }
  if (!l.spilled) {
    // Nothing free here: send the submitter to a node that has room (one hop only).
    if (auto target = spill_target(l.need); !target.empty()) {
      answer_spillback(l, target);
      return true;
    }
  }
  if (l.no_wait) {
    answer_lease(l);  // nothing anywhere: the submitter keeps its workers busier instead
    return true;
  }
  return false;
}

void Daemon::on_return_lease(IoLoop::Incoming& in) {
  auto rl = in.msg->env().getBody().getReturnLease();
  for (auto id : rl.getWorkerIds()) {
    auto it = workers_.find(id);
    if (it == workers_.end() || it->second.state != WState::kLeased) continue;
    if (it->second.dedicated) {
      kill(it->second.pid, SIGKILL);  // its exit gives back its resources and devices
      continue;
    }
    give_held(it->second);
    it->second.held.clear();
    it->second.bundle.clear();
    it->second.state = WState::kIdle;
  }
  reply_ok(in);
  process_leases();
  if (head_) process_actors();
}

// This node's own resources go through the same atomic scripts as the head's placements.
bool Daemon::take_local(const Res& need) {
  if (fenced_ || !fits(need, avail_)) return false;
  try {
    if (!reserve(*redis_, {{node_id_, need}})) {
      for (auto& [k, v] : need) avail_[k] -= v;
      return true;
    }
  } catch (const std::exception& e) {
    spdlog::error("reserving {}: {}", res_json(need), e.what());
  }
  refresh_local();
  return false;
}

void Daemon::give_local(const Res& need) {
  if (need.empty()) return;
  try {
    release(*redis_, node_id_, need);
  } catch (const std::exception& e) {
    spdlog::error("releasing {}: {}", res_json(need), e.what());
  }
  refresh_local();
}

void Daemon::give_held(Worker& w) {
  if (w.bundle.empty()) return give_local(w.held);
  try {
    release_bundle(*redis_, w.bundle, w.held);
  } catch (const std::exception& e) {
    spdlog::error("giving back {} to {}: {}", res_json(w.held), w.bundle, e.what());
  }
}

Daemon::BundleRoute Daemon::bundle_route(Lease& l) {
  auto infeasible = [](std::string why) { return BundleRoute{BundleRoute::Kind::kInfeasible, {}, std::move(why), {}}; };
  auto g = tables_->group(l.pg);
  if (!g) return infeasible("no placement group " + l.pg + " (or its record is unreadable)");
  const auto& bundles = g->bundles;
  const auto& nodes = g->nodes;
  int n = static_cast<int>(bundles.size());
  if (l.bundle >= n || l.bundle < -1)
    return infeasible("placement group " + l.pg + " has " + std::to_string(n) + " bundles; there is no bundle " +
                      std::to_string(l.bundle));
  int pick = l.bundle;
  if (pick < 0) {
    for (int i = 0; i < n && pick < 0; ++i)
      if (nodes[static_cast<size_t>(i)] == node_id_ && fits(l.need, bundles[static_cast<size_t>(i)])) pick = i;
    for (int i = 0; i < n && pick < 0; ++i)
      if (fits(l.need, bundles[static_cast<size_t>(i)])) pick = i;
    if (pick < 0) return infeasible("no bundle of placement group " + l.pg + " can hold " + res_json(l.need));
  }
  auto& b = bundles[static_cast<size_t>(pick)];
  if (!fits(l.need, b))
    return infeasible("bundle " + std::to_string(pick) + " of placement group " + l.pg + " (" + res_json(b) +
                      ") cannot hold " + res_json(l.need));
  const std::string& node = nodes[static_cast<size_t>(pick)];
  if (node.empty()) return {};  // not (re)placed yet: wait
  if (node == node_id_) {
    l.bundle = pick;
    return {BundleRoute::Kind::kHere, {}, {}, b};
  }
  auto address = peer_address(node);
  if (address.empty()) return {};
  l.bundle = pick;
  return {BundleRoute::Kind::kElsewhere, address, {}, {}};
}

void Daemon::refresh_local() {
  try {
    avail_ = read_res(*redis_, avail_key(node_id_));
  } catch (const std::exception& e) {
    spdlog::error("reading this node's resources: {}", e.what());
  }
}

// ---- jobs -------------------------------------------------------------------------------------

void Daemon::on_submit_job(IoLoop::Incoming& in) {
  auto sj = in.msg->env().getBody().getSubmitJob();
  if (sj.getEntrypoint().size() == 0) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, "empty entrypoint");
    return;
  }
  std::vector<std::string> argv;
  std::string ep;
  for (auto a : sj.getEntrypoint()) {
    argv.push_back(a);
    ep += (ep.empty() ? "" : " ") + std::string(a.cStr());
  }
  std::string cwd = sj.getCwd();
  std::string workdir = sj.getWorkingDir();
  if (!workdir.empty()) {
    auto dir = unpack_workdir(workdir, o_.session_dir + "/blobs/" + workdir);
    if (!dir) {
      reply_error(in, wire::ErrorCode::BAD_REQUEST, "the job's working directory: " + dir.why());
      return;
    }
    cwd = dir.value();
    if (argv[0].find('/') != std::string::npos && argv[0][0] != '/') argv[0] = cwd + "/" + argv[0];
  }
  argv[0] = which(argv[0]);
  std::string id = new_job_id();
  Job j;
  j.id = id;
  j.submitted = true;
  j.entrypoint = ep;
  j.cwd = cwd;
  j.workdir = workdir;
  j.log_path = log_dir_ + "/" + id + ".log";
  j.start = unix_time();
  SpawnOptions so;
  so.env = {{"YARD_ADDRESS", io_->address()}, {"YARD_TOKEN", token_}, {"YARD_SUBMISSION_ID", id}};
  for (auto kv : sj.getEnv()) {
    std::string s = kv;
    auto eq = s.find('=');
    if (eq != std::string::npos) so.env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  so.cwd = j.cwd;
  so.stdout_path = j.log_path;
  so.new_process_group = true;
  so.death_signal = SIGTERM;
  { std::ofstream(j.log_path, std::ios::app); }
  try {
    j.proc_pid = spawn(argv, so);
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::BAD_REQUEST, std::string("cannot start the job: ") + e.what());
    return;
  }
  tables_->add_job(id);
  save_job(j);
  spdlog::info("job {} submitted: {} (pid {})", id, ep, j.proc_pid);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto ji = m.env().getBody().initJobInfo();
  ji.setJobId(id);
  ji.setEntrypoint(ep);
  ji.setStatus(store::name(j.status));
  ji.setStartTime(j.start);
  ji.setLogPath(j.log_path);
  jobs_.emplace(id, std::move(j));
  io_->reply(in.routing_id, m.finish());
}

void Daemon::on_job_logs(IoLoop::Incoming& in) {
  auto jl = in.msg->env().getBody().getJobLogs();
  std::string id = jl.getJobId();
  auto rec = tables_->job(id);
  if (!rec) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no job " + id);
    return;
  }
  std::string data;
  uint64_t off = jl.getOffset();
  size_t max = std::min<uint32_t>(jl.getMaxBytes() ? jl.getMaxBytes() : 1 << 20, 4 << 20);
  uint64_t size = 0;
  if (!rec->log_path.empty()) {
    std::ifstream in_f(rec->log_path, std::ios::binary);
    if (in_f) {
      in_f.seekg(0, std::ios::end);
      size = static_cast<uint64_t>(in_f.tellg());
      if (off < size) {
        in_f.seekg(static_cast<std::streamoff>(off));
        data.resize(std::min<uint64_t>(max, size - off));
        in_f.read(data.data(), static_cast<std::streamsize>(data.size()));
        data.resize(static_cast<size_t>(in_f.gcount()));
      }
    }
  }
  // A stopped job has ended only once its process is gone and its exit code is known.
  auto live = jobs_.find(id);
  bool ended = live != jobs_.end() ? live->second.ended : rec->status != store::JobStatus::kRunning;
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto r = m.env().getBody().initJobLogsReply();
  r.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data()), data.size()));
  r.setNextOffset(off + data.size());
  r.setFinished(ended && off + data.size() >= size);
  r.setExitCode(rec->exit_code);
  io_->reply(in.routing_id, m.finish());
}

void Daemon::on_stop_job(IoLoop::Incoming& in) {
  std::string id = in.msg->env().getBody().getStopJob();
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "no job " + id);
    return;
  }
  auto& j = it->second;
  if (j.ended) {
    reply_ok(in);
    return;
  }
  j.status = store::JobStatus::kStopped;
  if (j.proc_pid) kill(-j.proc_pid, SIGTERM);
  else if (j.driver_pid) kill(j.driver_pid, SIGTERM);
  save_job(j);
  spdlog::info("job {} stop requested", id);
  reply_ok(in);
}

void Daemon::end_job(Job& j, std::optional<store::JobStatus> status, int exit_code) {
  if (status && j.status != store::JobStatus::kStopped) j.status = *status;
  if (j.ended && !status) return;
  if (status) {
    j.ended = true;
    j.exit_code = exit_code;
    j.end = unix_time();
  }
  // Its workers, actors and placement groups go with the driver; detached actors stay.
  for (auto& [id, w] : workers_)
    if (w.job_id == j.id && !w.detached) kill(w.pid, SIGKILL);
  for (auto& [id, a] : actors_)
    if (a.job == j.id && a.state != store::ActorState::kDead && !a.detached) {
      kill_actor_process(a);
      actor_failed(a, wire::ErrorCode::ACTOR_DIED, "its job " + j.id + " ended");
    }
  for (auto& [id, g] : pgs_)
    if (g.job == j.id && g.state != store::GroupState::kRemoved) remove_pg(g, "its job " + j.id + " ended");
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->job == j.id) {
      reply_error(it->routing, it->req, wire::ErrorCode::NOT_FOUND, "job " + j.id + " ended");
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  j.driver_pid = 0;
  if (!j.remote && (status || !j.submitted)) save_job(j);
  spdlog::info("job {} ended: {}", j.id, store::name(j.status));
}

// ---- housekeeping -----------------------------------------------------------------------------

void Daemon::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (pid == redis_pid_) {
      spdlog::error("redis-server (pid {}) {}", pid, describe_exit(status));
      redis_pid_ = 0;
      continue;
    }
    auto wp = worker_by_pid_.find(pid);
    if (wp != worker_by_pid_.end()) {
      auto wit = workers_.find(wp->second);
      worker_by_pid_.erase(wp);
      if (wit == workers_.end()) continue;
      Worker w = wit->second;
      workers_.erase(wit);
      give_held(w);
      give_gpus(w.gpus);
      remove_worker_segments(pid);
      auto job = jobs_.find(w.job_id);
      bool job_live = job != jobs_.end() && !job->second.ended;
      if (job_live) spdlog::warn("{} (pid {}) of job {} {}; log: {}", w.id, pid, w.job_id, describe_exit(status), w.log);
      if (!w.actor_id.empty()) {
        auto h = hosted_.find(w.actor_id);
        if (h != hosted_.end() && h->second.worker == w.id) {
          std::string cause = "its worker process on node " + node_id_ + " " + describe_exit(status) + " (log: " + w.log + ")";
          if (!h->second.replied)
            reply_error(h->second.routing, h->second.req, wire::ErrorCode::ACTOR_DIED,
                        "its worker died while constructing it: " + cause);
          else
            report_lost(w.actor_id, cause);
          hosted_.erase(h);
        }
      } else if (w.state == WState::kStarting && w.lease) {
        auto l = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& x) { return x.seq == w.lease; });
        if (l != leases_.end()) {
          --l->starting;
          if (job_live && ++job->second.startup_failures > 3) {
            reply_error(l->routing, l->req, wire::ErrorCode::INTERNAL,
                        "workers of job " + w.job_id + " keep dying during start-up (last " + describe_exit(status) + ", log: " + w.log + ")");
            leases_.erase(l);
          }
        }
      } else if (job_live && (w.state == WState::kLeased || w.state == WState::kIdle)) {
        try {
          spawn_worker(w.job_id, "", 0);  // the pool keeps its size
        } catch (const std::exception& e) {
          spdlog::error("cannot replace {}: {}", w.id, e.what());
        }
      }
      continue;
    }
    for (auto& [id, j] : jobs_) {
      if (j.proc_pid == pid) {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        {
          std::ofstream log(j.log_path, std::ios::app);
          if (code != 0) log << "[yard] job " << id << " " << describe_exit(status) << "\n";
        }
        end_job(j, code == 0 ? store::JobStatus::kSucceeded : store::JobStatus::kFailed, code);
        break;
      }
    }
  }
}

void Daemon::periodic() {
  reap();
  for (auto& [id, j] : jobs_)
    if (!j.ended && !j.submitted && j.driver_pid && kill(j.driver_pid, 0) != 0) {
      spdlog::warn("driver of job {} (pid {}) is gone", id, j.driver_pid);
      end_job(j, store::JobStatus::kFailed, -1);
    }
  auto now = Clock::now();
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->deadline <= now) {
      answer_lease(*it);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  process_leases();
  if (!head_) {
    if (now >= next_job_check_) {
      next_job_check_ = now + std::chrono::seconds(1);
      check_remote_jobs();
    }
    return;
  }
  process_actors();
  for (auto& [id, a] : actors_)
    if (!a.lookups.empty()) answer_lookups(a, true);
  if (now >= next_prune_) {
    next_prune_ = now + std::chrono::seconds(10);
    prune_dead_actors();
  }
  for (auto it = pgs_.begin(); it != pgs_.end();) it = it->second.state == store::GroupState::kRemoved ? pgs_.erase(it) : std::next(it);
  for (auto& [id, g] : pgs_) {
    if (g.state == store::GroupState::kPending || g.state == store::GroupState::kRescheduling) (void)try_place_pg(g, false);
    answer_pg_waiters(g);
  }
}


// ---- node role: hosting actors the head placed here ------------------------------------------

std::optional<std::vector<std::pair<int, double>>> Daemon::take_gpus(double amount) {
  std::vector<std::pair<int, double>> out;
  if (amount <= 0) return out;
  if (amount >= 1 - 1e-9) {
    int whole = static_cast<int>(std::ceil(amount - 1e-9));
    for (size_t i = 0; i < gpu_free_.size() && static_cast<int>(out.size()) < whole; ++i)
      if (gpu_free_[i] >= 1 - 1e-9) out.emplace_back(static_cast<int>(i), 1.0);
    if (static_cast<int>(out.size()) < whole) return std::nullopt;
  } else {
    // A share of one device: the fullest that still has room (keeps whole devices free).
    int best = -1;
    for (size_t i = 0; i < gpu_free_.size(); ++i)
      if (gpu_free_[i] + 1e-9 >= amount && (best < 0 || gpu_free_[i] < gpu_free_[static_cast<size_t>(best)]))
        best = static_cast<int>(i);
    if (best < 0) return std::nullopt;
    out.emplace_back(best, amount);
  }
  for (auto& [d, share] : out) gpu_free_[static_cast<size_t>(d)] -= share;
  return out;
}

void Daemon::give_gpus(const std::vector<std::pair<int, double>>& gpus) {
  for (auto& [d, share] : gpus)
    if (d >= 0 && static_cast<size_t>(d) < gpu_free_.size()) gpu_free_[static_cast<size_t>(d)] = std::min(1.0, gpu_free_[static_cast<size_t>(d)] + share);
}

// A job registered at the head, known here from its record in the control store. Its binary is
// fetched from the head by digest (no shared file system is assumed) and kept under this node's
// session directory.
void Daemon::with_job(const std::string& job_id, std::function<void(Result<Job*>)> k) {
  using R = Result<Job*>;
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) {
    if (it->second.ended) return k(R::fail("job " + job_id + " has ended"));
    if (!it->second.binary.empty()) return k(R::ok(&it->second));
  }
  auto rec = tables_->job(job_id);
  if (!rec) return k(R::fail("no job " + job_id + " in the control store"));
  if (rec->status != store::JobStatus::kRunning) return k(R::fail("job " + job_id + " is " + store::name(rec->status)));
  std::string digest = rec->digest;
  auto make = [this, job_id, f = *rec](const std::string& binary) mutable -> Job* {
    auto& j = jobs_[job_id];
    j.id = job_id;
    j.remote = true;
    j.binary = binary;
    j.cwd = fs::is_directory(f.cwd) ? f.cwd : o_.session_dir;
    j.entrypoint = f.entrypoint;
    j.start = unix_time();
    spdlog::info("job {} runs workers here: {}", job_id, binary);
    return &j;
  };
  if (digest.empty()) {
    if (access(rec->binary.c_str(), X_OK) != 0)
      return k(R::fail("job " + job_id + "'s program " + rec->binary + " is not on node " + node_id_));
    return k(R::ok(make(rec->binary)));
  }
  std::string path = o_.session_dir + "/blobs/" + digest;
  std::string workdir = rec->workdir;
  // The binary, then the working directory (if the job was submitted with one).
  auto with_workdir = [this, k, make, workdir, job_id](const std::string& binary) mutable {
    if (workdir.empty()) return k(R::ok(make(binary)));
    std::string archive = o_.session_dir + "/blobs/" + workdir;
    fetch_blob(workdir, archive, [this, k, make, workdir, archive, binary, job_id](const Problem& why) mutable {
      if (why) return k(R::fail("fetching job " + job_id + "'s working directory: " + *why));
      auto dir = unpack_workdir(workdir, archive);
      if (!dir) return k(R::fail("job " + job_id + "'s working directory: " + dir.why()));
      Job* j = make(binary);
      j->cwd = dir.value();
      k(R::ok(j));
    });
  };
  if (access(path.c_str(), X_OK) == 0) return with_workdir(path);
  fetch_blob(digest, path, [k, path, job_id, with_workdir](const Problem& why) mutable {
    if (why) return k(R::fail("fetching job " + job_id + "'s program: " + *why));
    with_workdir(path);
  });
}

void Daemon::fetch_blob(const std::string& digest, const std::string& path, std::function<void(const Problem&)> k) {
  if (access(path.c_str(), R_OK) == 0) return k(std::nullopt);
  auto& waiters = fetching_[digest];
  waiters.push_back(std::move(k));
  if (waiters.size() > 1) return;  // already on its way
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setGetBlob(digest);
  spdlog::info("fetching {} from the head", digest);
  io_->request(o_.join_address, rid, m.finish(),
               [this, digest, path](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 Problem why;
                 if (err) why = err->message;
                 else if (r->env().getBody().isError()) why = describe(r->env().getBody().getError());
                 else if (!r->env().getBody().isTaskReply()) why = "unexpected reply";
                 if (!why) {
                   auto bytes = r->value(r->env().getBody().getTaskReply().getResult());
                   if (sha256_hex(bytes->data(), bytes->size()) != digest) {
                     why = "the bytes do not match digest " + digest;
                   } else {
                     why = write_file_atomic(path, bytes->data(), bytes->size());
                   }
                 }
                 if (why) spdlog::error("fetching {}: {}", digest, *why);
                 auto ws = std::move(fetching_[digest]);
                 fetching_.erase(digest);
                 for (auto& w : ws) w(why);
               },
               std::chrono::seconds(120));
}

Result<std::string> Daemon::unpack_workdir(const std::string& digest, const std::string& archive) {
  using R = Result<std::string>;
  std::string dir = o_.session_dir + "/workdirs/" + digest;
  if (fs::is_directory(dir)) return R::ok(dir);
  if (access(archive.c_str(), R_OK) != 0) return R::fail("no uploaded archive " + digest);
  std::error_code ec;
  std::string tmp = dir + ".tmp" + random_hex(3);
  fs::create_directories(tmp, ec);
  SpawnOptions so;
  so.stdout_path = log_dir_ + "/unpack.log";
  pid_t pid = spawn({which("tar"), "-xzf", archive, "-C", tmp, "--no-same-owner"}, so);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fs::remove_all(tmp, ec);
    return R::fail("cannot unpack " + archive + " (see " + log_dir_ + "/unpack.log)");
  }
  fs::rename(tmp, dir, ec);
  if (ec && !fs::is_directory(dir)) return R::fail("cannot create " + dir + ": " + ec.message());
  spdlog::info("unpacked working directory {} into {}", digest, dir);
  return R::ok(dir);
}

Problem write_file_atomic(const std::string& path, const char* data, size_t size) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp" + random_hex(3);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(data, static_cast<std::streamsize>(size));
    if (!out) return "cannot write " + tmp;
  }
  chmod(tmp.c_str(), 0755);
  fs::rename(tmp, path, ec);
  if (ec) return "cannot write " + path + ": " + ec.message();
  return std::nullopt;
}

// Content-addressed files at the head: job binaries, uploaded once per digest.
void Daemon::on_blob(IoLoop::Incoming& in) {
  auto body = in.msg->env().getBody();
  std::string dir = o_.session_dir + "/blobs";
  auto valid = [](const std::string& d) {
    return d.size() == 64 && d.find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  if (body.isHasBlob()) {
    std::string d = body.getHasBlob();
    if (valid(d) && fs::exists(dir + "/" + d)) return reply_ok(in);
    return reply_error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  }
  if (body.isPutBlob()) {
    std::string d = body.getPutBlob().getDigest();
    auto bytes = in.msg->value(body.getPutBlob().getData());
    if (!valid(d) || sha256_hex(bytes->data(), bytes->size()) != d)
      return reply_error(in, wire::ErrorCode::BAD_REQUEST, "the blob's bytes do not match its digest");
    if (auto why = write_file_atomic(dir + "/" + d, bytes->data(), bytes->size()))
      return reply_error(in, wire::ErrorCode::INTERNAL, "cannot store blob: " + *why);
    spdlog::info("stored blob {} ({} bytes)", d, bytes->size());
    return reply_ok(in);
  }
  std::string d = body.getGetBlob();
  std::ifstream f(dir + "/" + d, std::ios::binary);
  if (!valid(d) || !f) return reply_error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.set_value(m.env().getBody().initTaskReply().initResult(), std::make_shared<StringBuffer>(std::move(data)));
  io_->reply(in.routing_id, m.finish());
}

// Jobs whose head-side record says they ended take their workers here with them.
void Daemon::check_remote_jobs() {
  for (auto& [id, j] : jobs_) {
    if (!j.remote || j.ended) continue;
    try {
      auto rec = tables_->job(id);
      if (rec && rec->status == store::JobStatus::kRunning) continue;
      if (!rec) spdlog::warn("job {}: its record is gone from the control store", id);
      j.status = rec ? rec->status : store::JobStatus::kFailed;
    } catch (const std::exception& e) {
      spdlog::error("checking job {}: {}", id, e.what());
      continue;
    }
    end_job(j, j.status, 0);
  }
}

void Daemon::on_host_actor(IoLoop::Incoming& in) {
  auto ha = in.msg->env().getBody().getHostActor();
  auto ca = ha.getCreate();
  std::string aid = ca.getActorId();
  Res release;
  for (auto r : ha.getRelease()) release[r.getName()] = r.getAmount();
  auto fail = [&](wire::ErrorCode code, const std::string& why) {
    give_local(release);
    reply_error(in, code, why);
  };
  if (aid.empty() || hosted_.count(aid)) return fail(wire::ErrorCode::BAD_REQUEST, "actor id missing or already hosted here");
  if (fenced_) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " is rejoining");
  // Held while the job's binary may still be on its way; answered when hosting fails or succeeds.
  Hosted h;
  h.routing = in.routing_id;
  h.req = in.msg->env().getRequestId();
  h.msg = std::shared_ptr<InMessage>(std::move(in.msg));
  hosted_.emplace(aid, std::move(h));
  with_job(ca.getJobId(), [this, aid, release](Result<Job*> job) {
    auto hit = hosted_.find(aid);
    if (hit == hosted_.end()) {  // killed meanwhile
      give_local(release);
      return;
    }
    auto& h = hit->second;
    auto fail = [&](wire::ErrorCode code, const std::string& msg) {
      give_local(release);
      reply_error(h.routing, h.req, code, msg);
      hosted_.erase(hit);
    };
    if (!job) return fail(wire::ErrorCode::NOT_FOUND, job.why());
    Job* j = job.value();
    auto c = h.msg->env().getBody().getHostActor();
    double gpu = 0;
    for (auto r : c.getResources())
      if (std::string(r.getName()) == "GPU") gpu += r.getAmount();
    std::vector<std::pair<int, double>> devices;
    if (gpu > 0) {
      auto d = take_gpus(gpu);
      if (!d) return fail(wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " has no device with that share of a GPU free");
      devices = *d;
    }
    std::string wid;
    try {
      wid = spawn_worker(j->id, aid, 0, c.getNumRestarts(), devices);
    } catch (const std::exception& e) {
      give_gpus(devices);
      return fail(wire::ErrorCode::INTERNAL, std::string("cannot start its worker on node ") + node_id_ + ": " + e.what());
    }
    auto& w = workers_.at(wid);
    w.held = release;
    w.detached = c.getCreate().getDetached();
    h.worker = wid;
  });
}

void Daemon::instantiate_hosted(const std::string& aid, Worker& w) {
  auto& h = hosted_.at(aid);
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto src = h.msg->env().getBody().getHostActor().getCreate();
  auto ia = m.env().getBody().initInstantiateActor();
  ia.setActorId(aid);
  ia.setJobId(src.getJobId());
  ia.setClassName(src.getClassName());
  ia.setName(src.getName());
  ia.setMaxConcurrency(src.getMaxConcurrency());
  auto args = ia.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], h.msg->value(src.getArgs()[i]));
  std::string wid = w.id;
  io_->request(w.address, rid, m.finish(),
               [this, aid, wid](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 auto it = hosted_.find(aid);
                 if (it == hosted_.end() || it->second.worker != wid || it->second.replied) return;
                 auto& h = it->second;
                 auto w = workers_.find(wid);
                 if (err || w == workers_.end()) return;  // the worker's exit answers the head
                 auto body = r->env().getBody();
                 if (body.isError()) {
                   h.replied = true;
                   auto code = body.getError().getCode() == wire::ErrorCode::TASK_ERROR ? wire::ErrorCode::ACTOR_DIED
                                                                                        : body.getError().getCode();
                   reply_error(h.routing, h.req, code, body.getError().getMessage());
                   hosted_.erase(it);
                   kill(w->second.pid, SIGKILL);  // its exit then gives its resources back
                   return;
                 }
                 w->second.state = WState::kActor;
                 h.replied = true;
                 h.msg.reset();
                 OutMessage m(token_, h.req, true);
                 auto info = m.env().getBody().initActorInfo();
                 info.setActorId(aid);
                 info.setAddress(w->second.address);
                 info.setWorkerId(wid);
                 info.setNodeId(node_id_);
                 info.setState(store::name(store::ActorState::kAlive));
                 io_->reply(h.routing, m.finish());
               },
               std::chrono::seconds(120));
}

void Daemon::on_kill_hosted(IoLoop::Incoming& in) {
  std::string aid = in.msg->env().getBody().getKillHosted();
  auto h = hosted_.find(aid);
  if (h != hosted_.end()) {
    auto w = workers_.find(h->second.worker);
    if (w != workers_.end()) kill(w->second.pid, SIGKILL);
    if (!h->second.replied) reply_error(h->second.routing, h->second.req, wire::ErrorCode::ACTOR_DIED, "killed by request");
    hosted_.erase(h);  // killed on purpose: nothing to report
  }
  reply_ok(in);
}

// Tells the head an actor's process here is gone; the head decides whether it restarts.
void Daemon::report_lost(const std::string& aid, const std::string& cause, int attempt) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  auto al = m.env().getBody().initActorLost();
  al.setActorId(aid);
  al.setCause(cause);
  al.setNodeId(node_id_);
  std::string head = head_ ? io_->address() : o_.join_address;
  io_->request(head, rid, m.finish(),
               [this, aid, cause, attempt](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 bool again = err || (r->env().getBody().isError() &&
                                      r->env().getBody().getError().getCode() == wire::ErrorCode::UNAVAILABLE);
                 if (!again) return;
                 // The head may be restarting: keep telling it for about a minute.
                 if (attempt < 120) {
                   io_->after(std::chrono::milliseconds(500), [this, aid, cause, attempt] { report_lost(aid, cause, attempt + 1); });
                 } else {
                   spdlog::error("cannot tell the head that actor {} was lost: {}", aid, err ? err->message : "unavailable");
                 }
               },
               std::chrono::seconds(10));
}

int run_daemon(const DaemonOptions& opts) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  Daemon d(opts);
  return d.run();
}

}  // namespace yard::sched
