#include "head/head_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <kj/exception.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/internal/allocator.h"
#include "common/credentials.h"
#include "store/format.h"
#include "yard/internal/messaging.h"
#include "yard/internal/tls_identity.h"
#include "yard/internal/session.h"
#include "yard/errors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

// ---- start-up ---------------------------------------------------------------------------------

// The session's folders, the log and the cluster token.
void HeadService::open_session(bool taking_over) {
  if (o_.session_dir.empty())
    o_.session_dir = yard_home() + "/session-" + std::to_string(static_cast<long>(start_time_)) + "-" + random_hex(3);
  log_dir_ = o_.session_dir + "/logs";
  fs::create_directories(log_dir_);
  fs::create_directories(o_.session_dir + "/redis");
  open_log(log_dir_, "head");
  raise_descriptor_limit();
  heap_for_daemon();
  token_file_ = o_.session_dir + "/token";
  if (!o_.standby_of.empty()) {  // a standby serves the cluster whose token it was given
    token_ = o_.standby_token;
    write_private_file(token_file_, token_);
  } else {
    token_ = taking_over ? read_token(token_file_) : create_token(token_file_);
  }
  if (!o_.team_key_file.empty()) write_private_file(team_key_file(o_.session_dir), given_team_key(o_.team_key_file));
  team_key_ = session_team_key(o_.session_dir);
  write_private_file(o_.session_dir + "/web_key", detail::web_key_for(token_));
  if (const char* pp = getenv("YARD_PARENT_PID")) parent_pid_ = atoi(pp);
}

// The head's own control store (store_servers.h): a redis-server, or a primary, replicas and
// Sentinels, with a password of their own (not the cluster token: a leak of one does not give the
// other) that the head hands to the cluster's processes in its (encrypted) replies.
void HeadService::start_redis() {
  servers_ = std::make_unique<StoreServers>(
      StoreServers::Settings{o_.session_dir, log_dir_, o_.host, o_.presence->tied_to_parent(), o_.control_replicas});
  servers_->start();
  redis_password_ = servers_->password();
  redis_tls_cert_ = servers_->tls_cert();
  o_.redis_address = servers_->address();
  redis_ = servers_->connect();
}

// The control store: the one a killed head left, a new one of this head's own, or the one named
// by --redis-address.
void HeadService::connect_control_store(const std::optional<Takeover>& takeover) {
  if (takeover) {
    redis_password_ = takeover->redis_password;
    redis_tls_cert_ = takeover->redis_tls_cert;  // trusted by find_takeover or ask_control_store
    if (!redis_)  // a standby's is open already, and holds the lease
      redis_ = std::make_unique<Redis>(sys::RedisEndpoint::parse(takeover->redis_address), redis_password_,
                                       std::chrono::seconds(3));
    o_.redis_address = takeover->redis_address;
    if (!takeover->servers_session_dir.empty()) {
      servers_ = std::make_unique<StoreServers>(
          StoreServers::Settings{takeover->servers_session_dir, log_dir_, o_.host, false, 0});
      servers_->adopt();
    }
    spdlog::warn("taking over the cluster of session {}: its head is gone, its Redis at {} is up", o_.session_dir,
                 takeover->redis_address);
  } else if (o_.redis_address.empty()) {
    start_redis();
  } else {
    const char* pw = getenv("YARD_REDIS_PASSWORD");
    redis_password_ = pw ? pw : "";
    redis_ = std::make_unique<Redis>(sys::RedisEndpoint::parse(o_.redis_address), redis_password_,
                                     std::chrono::seconds(3));
  }
  tables_ = std::make_unique<store::Tables>(*redis_);
  // Before any record is read or written: a store of another format is migrated or refused.
  if (auto migrated = store::settle_format(tables_->link, o_.redis_address); !migrated.empty()) spdlog::warn("{}", migrated);
  jobs_ = std::make_unique<JobTable>(*tables_);
  nodes_ = std::make_unique<ClusterNodes>(*redis_, *tables_, io_);
  HeadWiring wiring{io_, token_, reply_, *redis_, *tables_, *nodes_, head_node_};
  groups_ = std::make_unique<GroupManager>(wiring, *jobs_);
  actors_ = std::make_unique<ActorManager>(ActorManager::Context{
      wiring, *groups_, *jobs_,
      [this](const std::string& ev) { publish(ev); },
      [this](const Res& need) { return autoscaler_ && autoscaler_->wait_for_node(need); },
      [this] { return infeasible_waits(); }});
  groups_->infeasible_waits = [this] { return infeasible_waits(); };
  groups_->could_add_nodes = [this](const policy::GroupRequest& g) { return autoscaler_ && autoscaler_->wait_for_nodes(g); };
  groups_->on_removed = [this](const std::string& g, const std::string& why) { actors_->group_removed(g, why); };
  groups_->on_placed = [this] { actors_->process(); };
  JobQueue::Hooks hooks;
  hooks.start = [this](const store::JobRecord& j, const nlohmann::json& sub) { job_requests_->start_queued(j, sub); };
  hooks.held = [this] { return held_by_jobs(actor_records(actors_->all()), groups_->status()); };
  hooks.stop = [this](const std::string& id) { job_requests_->stop_program(id); };
  hooks.publish = [this](const std::string& ev) { publish(ev); };
  queue_ = std::make_unique<JobQueue>(*tables_, *nodes_, std::move(hooks));
  if (auto& c = autoscale_config_)
    queue_->configure({c->teams, c->starvation_s, c->usage_half_life_s, c->stop_grace_s, c->min_run_s, c->types});
  job_requests_ = std::make_unique<JobRequests>(JobRequests::Context{
      wiring, *jobs_, *queue_, *actors_, *groups_, team_key_,
      [this](const std::string& ev) { publish(ev); }});
  watch_ = std::make_unique<NodeWatch>(NodeWatch::Context{
      wiring, *actors_, *groups_, *queue_, *job_requests_, o_.heartbeat_timeout_s, [this] { return lease_->valid(); }, [this](const std::string& ev) { publish(ev); },
      [this](const std::string& id) {
        if (metrics_) metrics_->heartbeat_missed(id);
      },
      [this](const std::string& address) { ask_to_stop(address); }});
  blobs_ = std::make_unique<BlobStore>(o_.session_dir + "/blobs", tables_->blobs, io_, token_, reply_);
  tables_->link.gather_writes();
}

// On a replicated store the turn's answers leave only once a replica has what the turn wrote
// (WAIT), so that an answer never speaks of a record a failover could lose.
void HeadService::write_records() {
  if (Clock::now() < records_retry_at_) return;
  try {
    tables_->link.write_gathered();
    if (!redis_->acknowledged(kReplicaWait)) {
      spdlog::warn("no replica of the control store acknowledged this turn's writes within {} ms", kReplicaWait.count());
      if (metrics_) metrics_->unacknowledged();
    }
  } catch (const std::exception& e) {
    records_retry_at_ = Clock::now() + std::chrono::seconds(1);
    spdlog::error("writing actors' records to Redis: {}; kept, and written again in a second", e.what());
  }
}

// Rebuilds a taken-over cluster and starts the timers.
void HeadService::begin_serving() {
  if (recovered_) {
    // State is rebuilt on the loop thread before any request is served (requests arriving
    // meanwhile are answered "unavailable, retry").
    on_loop([this] {
      try {
        rebuild();
      } catch (const std::exception& e) {
        spdlog::error("rebuilding the cluster state from Redis: {}", e.what());
      }
    });
  }
  // The queue after the jobs (a job that ended while there was no head leaves it).
  on_loop([this] {
    try {
      queue_->rebuild();
    } catch (const std::exception& e) {
      spdlog::error("reading the job queue from Redis: {}", e.what());
    }
  });
  tables_->cluster.put(io_->address(), o_.session_dir, log_dir_, start_time_);
  // Where the store's servers are recorded (redis.pids): this session's when this head started
  // them; a head that took the cluster over keeps the first one's, for the next takeover to adopt.
  if (servers_) tables_->cluster.set_servers_session(servers_->session_dir());
  // Beyond loopback the web endpoints speak HTTPS with the cluster's web identity (web_server.h).
  if (curve_for_host(o_.host)) {
    web_ = make_web_identity(o_.session_dir + "/web");
    web_pem_ = read_web_identity(web_);
  }
  if (o_.metrics_port >= 0) metrics_ = std::make_unique<HeadMetrics>(o_.host, o_.metrics_port, token_, web_);
  tables_->cluster.set_head_metrics(metrics_ ? metrics_->address() : "");
  if (o_.dashboard_port >= 0) {
    try {
      dashboard_ = std::make_unique<Dashboard>(o_.host, o_.dashboard_port, io_->address(), token_, web_);
    } catch (const std::exception& e) {
      spdlog::error("{}: the cluster runs without it", e.what());
    }
  }
  tables_->cluster.set_dashboard(dashboard_ ? dashboard_->url() : "");
  // From here on only the loop thread uses the control store: the records this thread gathered
  // are written before the loop's first answer, and each turn's before its answers.
  io_->post([this] { io_->before_sending([this] { write_records(); }); });
  serving_.store(true);
  io_->post([this] {
    nodes_->refresh();
    io_->every(std::chrono::milliseconds(50), [this] { periodic(); });
    watch_->begin(Clock::now());
    io_->every(NodeWatch::kCheckPeriod, [this] { watch_->check(); });
    io_->every(std::chrono::minutes(10), [this] { sweep_blobs(); });
    io_->every(lease_->timing().renew_every, [this] { renew_lease(); });
    if (metrics_) io_->every(std::chrono::seconds(1), [this] { update_metrics(); });
    if (autoscaler_) io_->every(std::chrono::seconds(1), [this] { autoscaler_->tick(); });
  });
}

// Runs f on the I/O thread (which owns the control-store connection once serving) and waits.
void HeadService::on_loop(std::function<void()> f) {
  std::promise<void> done;
  auto fut = done.get_future();
  io_->post([&] {
    try {
      f();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  fut.get();
}

void HeadService::start_head_node() {
  if (recovered_) {
    bool kept = false;
    on_loop([&] {
      auto cluster = tables_->cluster.fields();
      auto it = cluster.find("head_node");
      if (it == cluster.end() || it->second.empty() || !tables_->nodes.heartbeating(it->second)) return;
      head_node_ = it->second;
      auto fields = tables_->nodes.fields(head_node_);
      head_node_pid_ = fields.count("pid") ? atoi(fields["pid"].c_str()) : 0;
      kept = true;
    });
    if (kept) {
      spdlog::info("the head's node {} (pid {}) kept running: it stays", head_node_, head_node_pid_);
      return;
    }
  }
  std::vector<std::string> argv{self_exe(), "start", "--address", io_->address(), "--block", "--head-node",
                                "--port", "0", "--host", o_.host, "--session-dir", o_.session_dir,
                                "--heartbeat-timeout", std::to_string(o_.heartbeat_timeout_s),
                                "--num-gpus", std::to_string(o_.num_gpus)};
  if (o_.num_cpus > 0) argv.insert(argv.end(), {"--num-cpus", std::to_string(o_.num_cpus)});
  if (o_.metrics_port >= 0)
    argv.insert(argv.end(), {"--metrics-port", std::to_string(o_.metrics_port == 0 ? 0 : o_.metrics_port + 1)});
  if (o_.object_store_bytes > 0) argv.insert(argv.end(), {"--object-store-memory", std::to_string(o_.object_store_bytes)});
  if (!o_.resources.empty()) argv.insert(argv.end(), {"--resources", json(o_.resources).dump()});
  if (o_.presence->tied_to_parent()) argv.push_back("--embedded");
  SpawnOptions so;
  so.env["YARD_TOKEN"] = token_;
  so.stdout_path = log_dir_ + "/node.out";
  if (o_.presence->tied_to_parent()) {
    so.death_signal = SIGTERM;
    so.env["YARD_PARENT_PID"] = std::to_string(getpid());
  } else {
    so.new_process_group = true;  // not stopped by a signal meant for the head
  }
  auto ready = spawn_ready(argv, so, std::chrono::seconds(30));
  pid_t pid = ready.first;
  const std::string& line = ready.second;
  if (line.empty() || line.rfind("ERROR", 0) == 0) {
    terminate(pid, SIGTERM, std::chrono::seconds(5));
    throw Error("the head's node manager did not start: " + (line.empty() ? "no answer within 30 s" : line.substr(7)) +
                " (see " + log_dir_ + "/node.log)");
  }
  on_loop([&] {
    head_node_pid_ = pid;
    head_node_child_ = true;
    head_node_ = tables_->cluster.fields()["head_node"];
    nodes_->refresh();
  });
}

// A stopped cluster stops its nodes: every node that joined is asked to stop (its workers and
// jobs with it); the head's own node manager is stopped with the head. `then` runs once every node
// has answered, or after kStopAnswers: a request to a node the head has no open link to leaves
// only once the link is made, and the head's own stop would drop it.
void HeadService::stop_nodes(std::function<void()> then) {
  nodes_->refresh();  // a node that joined a moment ago too
  auto waiting = std::make_shared<size_t>(1);
  auto finish = std::make_shared<std::function<void()>>(std::move(then));
  auto fire = [finish] {
    if (!*finish) return;
    auto f = std::move(*finish);
    *finish = nullptr;
    f();
  };
  auto answered = [waiting, fire] {
    if (--*waiting == 0) fire();
  };
  for (auto& [id, n] : nodes_->all()) {
    if (id == head_node_ || nodes_->dead(id) || n.address.empty()) continue;  // draining ones too
    ++*waiting;
    ask_to_stop(n.address, answered);
  }
  size_t asked = *waiting - 1;
  spdlog::info("asked {} node{} to stop", asked, asked == 1 ? "" : "s");
  try {
    for (auto& standby : tables_->heads.standbys()) {
      ++*waiting;
      ask_to_stop(standby, answered);
    }
  } catch (const std::exception& e) {
    spdlog::warn("cannot list the standby heads to stop them: {}", e.what());
  }
  io_->after(kStopAnswers, fire);
  answered();
}

// A Shutdown request to a node manager; `answered` runs when it answers or cannot be reached.
void HeadService::ask_to_stop(const std::string& address, std::function<void()> answered) {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setShutdown();
  io_->request(address, rid, m.finish(),
               [answered = std::move(answered)](std::unique_ptr<InMessage>, std::optional<LocalError>) {
                 if (answered) answered();
               },
               kStopAnswers);
}

void HeadService::stop_head_node() {
  pid_t pid = 0;
  on_loop([&] { std::swap(pid, head_node_pid_); });
  if (pid <= 0) return;
  spdlog::info("stopping the head's node manager (pid {})", pid);
  terminate(pid, SIGTERM, std::chrono::seconds(15));
}

namespace {
// Until `port` can be bound on `host` (as the I/O loop binds it, with SO_REUSEADDR), or `limit`.
void wait_for_port(const std::string& host, int port, std::chrono::milliseconds limit) {
  auto end = Clock::now() + limit;
  do {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr) != 1 ||
              ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (Clock::now() < end);
}
}  // namespace

int HeadService::run() {
  try {
    start_time_ = unix_time();
    if (!o_.autoscaler_config.empty() || !o_.cluster_config.empty()) {
      bool autoscaler = !o_.autoscaler_config.empty();
      auto c = read_autoscale_config(autoscaler ? o_.autoscaler_config : o_.cluster_config, autoscaler);
      if (!c) throw Error(c.why());
      autoscale_config_ = c.value();
    }
    std::optional<Takeover> takeover;
    if (o_.standby_of.empty()) takeover = find_takeover();
    if (takeover) takeover->servers_session_dir = o_.session_dir;
    open_session(takeover.has_value());
    // A head killed a moment ago may still be closing its listener (a large process takes a
    // while to exit): a head taking over waits a few seconds for the port.
    if (takeover && o_.port > 0) wait_for_port(o_.host, o_.port, std::chrono::seconds(5));
    // Listen first: a busy port is the most common start-up error and should fail fast.
    io_.open(std::make_unique<IoLoop>(o_.host, o_.port, token_, [this](Incoming in) { handle(std::move(in)); }));
    if (!o_.standby_of.empty()) {
      takeover = wait_as_standby();
      if (!takeover) {
        io_->stop();
        spdlog::info("stopped (a standby)");
        return 0;
      }
    }
    connect_control_store(takeover);
    recovered_ = takeover.has_value();
    take_lease(recovered_);
    start_autoscaler();
    begin_serving();
    start_head_node();
    ClusterRecord rec{io_->address(), o_.session_dir, log_dir_, token_file_, getpid()};
    o_.presence->announce(rec);
    spdlog::info("head listening on {}, redis at {}, its node {} (pid {}), session {}", io_->address(), o_.redis_address,
                 head_node_, head_node_pid_, o_.session_dir);
    report_ready(o_.ready_fd, io_->address() + " " + token_file_);
    wait_for_stop(parent_pid_);
    if (stepped_down_) {
      io_->stop();
      o_.presence->withdraw(rec);
      spdlog::info("stopped (stepped down)");
      return 0;
    }

    on_loop([this] {
      if (autoscaler_) autoscaler_->shutdown();
      nodes_->flush();
    });
    stop_head_node();
    io_->stop();
    o_.presence->withdraw(rec);
    if (servers_) servers_->stop();
    spdlog::info("stopped");
    return 0;
  } catch (const std::exception& e) {
    report_failure(o_.ready_fd, e.what());
    if (io_) io_->stop();
    if (head_node_child_ && head_node_pid_) terminate(head_node_pid_, SIGTERM, std::chrono::seconds(5));
    if (servers_) servers_->stop();
    return 1;
  }
}

// ---- requests ---------------------------------------------------------------------------------

void HeadService::handle(Incoming in) {
  if (!serving_.load()) {
    // A standby stops when its cluster stops (the active head asks it).
    if (!o_.standby_of.empty() && !lease_held_.load() && in.msg->env().getBody().isShutdown()) {
      spdlog::info("the cluster stops: so does this standby");
      reply_.ok(in);
      request_stop();
      return;
    }
    reply_.error(in, wire::ErrorCode::UNAVAILABLE, not_serving_why());
    return;
  }
  reply_.guarded(in, [&] { handle_head_request(in); });
}

void HeadService::handle_head_request(Incoming& in) {
  using B = wire::Envelope::Body;
  switch (in.msg->env().getBody().which()) {
    case B::SHUTDOWN:
    {
      spdlog::info("shutdown requested: stopping the cluster's nodes, then the head");
      auto asker = std::make_shared<Incoming>(std::move(in));
      stop_nodes([this, asker] {
        reply_.ok(*asker);
        request_stop();
      });
      return;
    }
    case B::REGISTER_JOB: return job_requests_->on_register_job(in);
    case B::KILL_ACTOR: return actors_->on_kill(in);
    case B::CREATE_ACTOR: return actors_->on_create(in);
    case B::GET_ACTOR: return actors_->on_get(in);
    case B::ACTOR_LOST: return actors_->on_lost(in);
    case B::CREATE_PLACEMENT_GROUP: return groups_->on_create(in);
    case B::WAIT_PLACEMENT_GROUP: return groups_->on_wait(in);
    case B::REMOVE_PLACEMENT_GROUP: return groups_->on_remove(in);
    case B::HAS_BLOB:
    case B::PUT_BLOB:
    case B::GET_BLOB: return blobs_->handle(in);
    case B::DRAIN_NODE: return watch_->on_drain(in);
    case B::SUBMIT_JOB: return job_requests_->on_submit_job(in);
    case B::JOB_LOGS: return job_requests_->on_job_logs(in);
    case B::STOP_JOB: return job_requests_->on_stop_job(in, in.msg->env().getBody().getStopJob());
    case B::JOB_CONTROL: return job_requests_->on_job_control(in);
    case B::STATUS: return on_status(in);
    case B::STATUS_SUMMARY: return on_status_summary(in);
    case B::TIMELINE: return job_requests_->on_timeline(in);
    case B::JOB_CURVES: return job_requests_->on_job_curves(in);
    case B::GET_CONTROL_STORE: return on_get_control_store(in);
    case B::WHERE_IS_HEAD: return on_where_is_head(in);
    case B::LIST_JOBS: return job_requests_->on_list_jobs(in);
    case B::FINISH_JOB: return job_requests_->on_finish_job(in);
    case B::RESTART_JOB: return job_requests_->on_restart_job(in);
    case B::REQUEST_LEASE:
    case B::RETURN_LEASE:
    case B::REGISTER_WORKER: {
      auto node = job_requests_->driver_node();
      return reply_.error(in, wire::ErrorCode::BAD_REQUEST,
                          "this is the head service: workers are leased by node managers (the head's node is at " +
                              (node.second.empty() ? std::string("-") : node.second) + ")");
    }
    default:
      reply_.error(in, wire::ErrorCode::BAD_REQUEST, "the head does not serve this request");
  }
}

void HeadService::on_get_control_store(Incoming& in) {
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  auto cs = m.env().getBody().initControlStore();
  cs.setAddress(o_.redis_address);
  cs.setPassword(redis_password_);
  cs.setTlsCert(redis_tls_cert_);
  cs.setWebTlsKey(web_pem_.first);
  cs.setWebTlsCert(web_pem_.second);
  io_->reply(in.routing_id, m.finish());
}

void HeadService::update_metrics() {
  HeadMetrics::Sample s;
  s.nodes = nodes_->by_state();
  s.actors = actor_counts(actors_->all());
  s.groups = groups_->counts();
  s.jobs = jobs_->counts();
  s.store_reconnects = redis_->reconnects();
  for (auto& [id, n] : nodes_->all()) {
    if (!n.alive) continue;
    add(s.total, n.total);
    add(s.avail, n.avail);
  }
  metrics_->update(s);
}

void HeadService::publish(const std::string& ev) const {
  if (metrics_) {
    auto type = json::parse(ev, nullptr, false);
    if (type.is_object() && type.contains("type") && type["type"].is_string()) metrics_->event(type["type"]);
  }
  try {
    tables_->journals.publish(ev);
  } catch (const std::exception& e) {
    spdlog::error("publishing an event: {}", e.what());
  }
}

// ---- housekeeping -----------------------------------------------------------------------------

void HeadService::periodic() {
  reap();
  for (Job* j : jobs_->orphaned()) {
    spdlog::warn("driver of job {} (pid {}) is gone", j->id, j->driver_pid);
    job_requests_->end_job(*j, store::JobStatus::kFailed);
  }
  actors_->process();
  actors_->tick();
  groups_->tick();
  queue_->tick();
  if (autoscaler_) autoscaler_->tick_if_poked();
}

void HeadService::sweep_blobs() {
  try {
    blobs_->sweep(jobs_->blobs_in_use(), static_cast<double>(time(nullptr)));
  } catch (const std::exception& e) {
    spdlog::warn("sweeping unused blobs: {}", e.what());
  }
}

// The children this process started: its Redis servers and the head's node manager.
void HeadService::reap() {
  if (servers_) servers_->watch();
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (servers_ && servers_->exited(pid, status)) {
      continue;
    } else if (pid == head_node_pid_) {
      spdlog::error("the head's node manager (pid {}) {}; see {}/node.log", pid, describe_exit(status), log_dir_);
      head_node_pid_ = 0;
    } else if (autoscaler_) {
      autoscaler_->child_exited(pid, status);
    }
  }
}

}  // namespace yard::sched
