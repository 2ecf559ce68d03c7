#include "node/node_manager.h"
#include "node/worker_logs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <kj/exception.h>
#include <spdlog/spdlog.h>

#include "common/join.h"
#include "yard/internal/allocator.h"
#include "yard/internal/messaging.h"
#include "yard/internal/node_objects.h"

#include "yard/process.h"
#include "yard/internal/session.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;


// ---- start-up ---------------------------------------------------------------------------------

// The session's folders, the log, the cluster token and this node's id. The head's node shares
// the head's session directory (its blobs, its logs folder, its token file).
void NodeManager::open_session() {
  if (o_.session_dir.empty())
    o_.session_dir = yard_home() + "/session-" + std::to_string(static_cast<long>(start_time_)) + "-" + random_hex(3);
  log_dir_ = o_.session_dir + "/logs";
  fs::create_directories(log_dir_);
  open_log(log_dir_, "node");
  raise_descriptor_limit();
  heap_for_daemon();
  token_file_ = o_.session_dir + "/token";
  token_ = o_.join_token;
  if (o_.role == NodeRole::kJoined) {  // the head's node shares the head's token file
    int fd = ::open(token_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw Error("cannot write " + token_file_);
    (void)!::write(fd, token_.data(), token_.size());
    ::close(fd);
  }
  node_id_ = o_.node_id.empty() ? "node-" + random_hex(4) : o_.node_id;
  if (const char* pp = getenv("YARD_PARENT_PID")) parent_pid_ = atoi(pp);
}

// What this node offers: CPUs, memory, GPUs (its NVIDIA devices unless told) and custom resources.
void NodeManager::measure_resources() {
  double cpus = o_.num_cpus > 0 ? o_.num_cpus : std::max(1u, std::thread::hardware_concurrency());
  measured_ = o_.resources;
  measured_["CPU"] = cpus;
  measured_["memory"] = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  int gpus = o_.num_gpus;
  if (gpus < 0) {
    gpus = 0;
    std::error_code ec;
    for (auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) (void)e, ++gpus;
  }
  if (gpus > 0) measured_["GPU"] = gpus;
  gpu_devices_ = gpus;
  for (auto& [k, v] : o_.resources)
    if (!(v >= 0) || !std::isfinite(v)) throw Error("resource " + k + " has a bad amount");
}

// The head says where the control store is; a wrong token is refused here, clearly.
void NodeManager::join() {
  auto access = ask_control_store(io_, o_.join_address, token_);
  o_.join_address = access.head;  // of a head and its standbys, the one that serves
  redis_address_ = access.address;
  redis_password_ = access.password;
  // Beyond loopback the cluster's web endpoints speak HTTPS, all with the head's web identity.
  web_ = store_web_identity(o_.session_dir + "/node-web", access.web_tls_key, access.web_tls_cert);
  redis_ = std::make_unique<Redis>(sys::RedisEndpoint::parse(redis_address_), redis_password_, std::chrono::seconds(3));
  tables_ = std::make_unique<store::Tables>(*redis_);
}

// The node's processes count their objects' bytes in a segment this node makes; over the limit
// they spill to spill_dir_ (removed with the node). Segments that processes killed with their
// node manager left behind go first.
void NodeManager::open_object_memory() {
  ShmPool::remove_orphans();
  uint64_t limit = o_.object_store_bytes;
  if (limit == 0) limit = uint64_t(double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) * 0.3);
  spill_dir_ = o_.session_dir + "/spill-" + node_id_;
  fs::create_directories(spill_dir_);
  memory_ = detail::NodeMemory::create(node_id_, limit, spill_dir_);
  if (!memory_) spdlog::warn("cannot create the node's object memory segment: objects will not spill");
}

// Processes that died: their slots and their spilled files go.
void NodeManager::sweep_object_memory() {
  detail::local_copies::sweep();
  if (!memory_) return;
  memory_->sweep();
  std::error_code ec;
  for (auto& e : fs::directory_iterator(spill_dir_, ec)) {
    auto name = e.path().filename().string();
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (pid > 0 && sys::process_dead(pid)) fs::remove(e.path(), ec);
  }
}

// Resources and the heartbeat first, then the membership: the failure detector never sees a
// member without a heartbeat, and the scheduler never sees one without resources.
void NodeManager::begin_serving() {
  open_object_memory();
  workers_.configure({{"YARD_NODE_ADDRESS", io_->address()}, {"YARD_TOKEN", token_}, {"YARD_NODE_ID", node_id_},
                      {"YARD_HEAD_ADDRESS", o_.join_address}, {"YARD_NODE_HOST", o_.host}},
                     log_dir_, gpu_devices_ > 0);
  ledger_ = control_store_ledger(*redis_);
  res_ = std::make_unique<LocalResources>(*ledger_, node_id_, measured_, gpu_devices_);
  res_->reopen();
  JobRunner::Setting js{node_id_, o_.session_dir, log_dir_, o_.join_address, token_, o_.role == NodeRole::kHeadNode};
  jobs_ = std::make_unique<JobRunner>(*tables_, blobs_, js, [this](const Job& j) {
    workers_.stop_job(j.id);  // detached actors stay
    leases_->queue().refuse_job(j.id, "job " + j.id + " ended");
    curve_values_.erase(j.id);
  });
  leases_ = std::make_unique<LeaseDesk>(LeaseDesk::Context{
      io_, token_, node_id_, *tables_, workers_, *res_, peers_, *jobs_,
      [this](const std::string& job, uint64_t seq, const Devices& devices, const std::string& runtime_env) {
        return spawn_worker(job, "", seq, 0, devices, runtime_env);
      },
      [this](const std::string& job, double waited, size_t n) {
        if (metrics_) metrics_->lease_answered(waited, n);
        lease_span(job, waited, n);
      }});
  if (o_.metrics_port >= 0) metrics_ = std::make_unique<NodeMetrics>(o_.host, o_.metrics_port, token_, node_id_, web_);
  hosting_ = std::make_unique<ActorHosting>(io_, token_, node_id_, workers_, *res_, static_cast<ActorHosting::Node&>(*this));
  last_contact_ = Clock::now();
  save_node();
  tables_->nodes.add(node_id_, o_.role == NodeRole::kHeadNode ? "head" : "node");
  if (o_.role == NodeRole::kHeadNode) tables_->cluster.set_head_node(node_id_);
  io_->post([this] { io_->every(std::chrono::milliseconds(50), [this] { periodic(); }); });
  io_->post([this] {
    io_->every(beat_period(), [this] { save_node(); });
    io_->every(std::chrono::milliseconds(250), [this] {
      if (jobs_) jobs_->ship_logs();
    });
  });
}

int NodeManager::run() {
  try {
    start_time_ = unix_time();
    open_session();
    measure_resources();
    // Listen first: a busy port is the most common start-up error and should fail fast.
    io_.open(std::make_unique<IoLoop>(o_.host, o_.port, token_, [this](Incoming in) { handle(std::move(in)); }));
    join();
    begin_serving();
    ClusterRecord rec{io_->address(), o_.session_dir, log_dir_, token_file_, getpid()};
    o_.presence->announce(rec);
    spdlog::info("node {} listening on {}{}, head at {}, redis at {}, {} CPUs, session {}", node_id_, io_->address(),
                 io_->data_link() ? " (data link " + io_->data_link()->address + ")" : std::string(), o_.join_address,
                 redis_address_, measured_["CPU"], o_.session_dir);
    report_ready(o_.ready_fd, io_->address() + " " + token_file_);
    wait_for_stop(parent_pid_);

    std::promise<void> done;
    auto f = done.get_future();
    io_->post([this, &done] {
      shutdown_all();
      done.set_value();
    });
    f.wait_for(std::chrono::seconds(10));
    io_->stop();
    o_.presence->withdraw(rec);
    memory_.reset();
    std::error_code ec;
    if (!spill_dir_.empty()) fs::remove_all(spill_dir_, ec);
    spdlog::info("stopped");
    return 0;
  } catch (const std::exception& e) {
    report_failure(o_.ready_fd, e.what());
    return 1;
  }
}

// A heartbeat that runs later than half the timeout past its period says this process (its loop)
// or the machine stalled: said in the log, since the head may have declared the node dead.
void NodeManager::note_late_beat() {
  auto now = Clock::now();
  std::chrono::duration<double> period = beat_period(), timeout(o_.heartbeat_timeout_s);
  if (last_beat_ != Clock::time_point{} && now - last_beat_ > period + timeout / 2)
    spdlog::warn("this node's heartbeat ran {:.1f} s after the last one (every {:.2f} s): the node manager or this "
                 "machine stalled, and past {} s the head declares the node dead",
                 std::chrono::duration<double>(now - last_beat_).count(), period.count(), o_.heartbeat_timeout_s);
  last_beat_ = now;
}

void NodeManager::save_node() {
  note_late_beat();
  try {
    if (redis_->cmd({"EXISTS", avail_key(node_id_)}).integer() == 0 && !res_->fenced()) {
      // The head declared this node dead (it was cut off too long) and moved its actors away:
      // what still runs here is stale. Stop it, and come back as an empty node.
      spdlog::warn("this node was declared dead while it was silent: stopping its workers and rejoining");
      res_->fence();
      workers_.kill_all();
      if (jobs_) jobs_->abandon_all();  // the head ran them elsewhere, or ended them
    }
    if (res_->fenced() && workers_.empty()) res_->reopen();
    if (!res_->fenced()) res_->refresh();
    peers_.refresh();
    follow_head();
    leases_->exchange_demand();
    store::NodeReport r;
    r.address = io_->address();
    r.hostname = hostname();
    r.pid = getpid();
    r.log_dir = log_dir_;
    r.leased = workers_.leased();
    r.start_time = start_time_;
    r.now = unix_time();
    r.workers = static_cast<long>(workers_.size());
    if (memory_) {
      sweep_object_memory();
      auto t = memory_->totals();
      r.object_store_limit = memory_->limit();
      r.object_store_used = t.used;
      r.spilled_bytes = t.spilled;
      r.spilled_objects = t.spilled_objects;
    }
    if (metrics_) {
      r.metrics = metrics_->address();
      update_metrics(r);
    }
    tables_->nodes.report(node_id_, r, std::chrono::milliseconds(static_cast<long>(o_.heartbeat_timeout_s * 1000)));
    last_contact_ = Clock::now();
    if (auto line = record_errors_.success(last_contact_)) spdlog::info("node record: {}", *line);
  } catch (const std::exception& e) {
    auto now = Clock::now();
    if (auto line = record_errors_.failure(std::string("cannot update the node record: ") + e.what(), now))
      spdlog::error("{}", *line);
    if (o_.head_timeout_s > 0 && !gave_up_ && now - last_contact_ > std::chrono::duration<double>(o_.head_timeout_s)) {
      spdlog::error("the cluster's control store at {} has not been reachable for {:g} s (--head-timeout): stopping this "
                    "node and its workers",
                    redis_address_, o_.head_timeout_s);
      gave_up_ = true;
      request_stop();
    }
  }
}

void NodeManager::update_metrics(const store::NodeReport& r) {
  NodeMetrics::Sample s;
  s.total = res_->total();
  s.avail = res_->fenced() ? Res{} : res_->available();
  s.workers = workers_.by_state();
  s.leases_waiting = leases_->queue().size();
  s.store_used = r.object_store_used;
  s.store_limit = r.object_store_limit;
  s.spilled_bytes = r.spilled_bytes;
  s.spilled_objects = r.spilled_objects;
  for (pid_t pid : workers_.pids()) s.workers_rss += process_usage(pid).second;
  metrics_->update(s);
  metrics_->reported().sweep([](int pid) { return sys::process_dead(pid); });
}

void NodeManager::shutdown_all() {
  workers_.kill_all();
  if (jobs_) jobs_->terminate_all();
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && (workers_.any_alive() || (jobs_ && jobs_->any_running())))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  workers_.remove_segments();
  if (jobs_) jobs_->kill_all();
  try {
    tables_->nodes.remove(node_id_);
  } catch (...) {
  }
}

// ---- requests ---------------------------------------------------------------------------------

void NodeManager::handle(Incoming in) {
  using B = wire::Envelope::Body;
  reply_.guarded(in, [&] {
    if (!hosting_) return reply_.error(in, wire::ErrorCode::UNAVAILABLE, "node " + node_id_ + " is starting");
    if (from_stale_head(in)) return;
    switch (in.msg->env().getBody().which()) {
      case B::REGISTER_WORKER: return on_register_worker(in);
      case B::REQUEST_LEASE: return leases_->on_request(in);
      case B::RETURN_LEASE: return leases_->on_return(in);
      case B::HOST_ACTOR: return hosting_->host(in);
      case B::KILL_HOSTED: return hosting_->kill(in);
      case B::WARM_POOL: return on_warm_pool(in);
      case B::SUBMIT_JOB: return on_submit_job(in);
      case B::STOP_JOB: return on_stop_job(in);
      case B::JOB_ENDED: return on_job_ended(in);
      case B::REPORT_METRICS: return on_report_metrics(in);
      case B::WHERE_IS_HEAD: {  // a process whose head requests go unanswered: the active head now
        OutMessage m(token_, in.msg->env().getRequestId(), true);
        m.env().getBody().setHeadIs(o_.join_address);
        return io_->reply(in.routing_id, m.finish());
      }
      case B::FIND_LOG_LINES: {  // `yard logs --actor | --task`: its workers' lines here
        auto f = in.msg->env().getBody().getFindLogLines();
        LogQuery q{f.getActorId(), f.getTaskId(), f.getMaxLines() ? f.getMaxLines() : 1000u};
        // Read off the loop: the logs may be large.
        std::thread([this, q, routing = in.routing_id, req = in.msg->env().getRequestId()] {
          OutMessage m(token_, req, true);
          m.env().getBody().setStatusReply(find_log_lines(log_dir_, q));
          io_->reply(routing, m.finish());
        }).detach();
        return;
      }
      case B::SHUTDOWN:
        spdlog::info("shutdown requested");
        reply_.ok(in);
        request_stop();
        return;
      default:
        reply_.error(in, wire::ErrorCode::BAD_REQUEST,
                     "this is node " + node_id_ + "'s manager, not the head: send this request to the cluster's head at " +
                         o_.join_address);
    }
  });
}

// ---- housekeeping -----------------------------------------------------------------------------

void NodeManager::periodic() {
  reap();
  auto now = Clock::now();
  leases_->queue().expire(now);
  leases_->queue().process();
  flush_lease_spans();
  workers_.enforce_stops(now);
  if (now >= next_job_check_) {
    next_job_check_ = now + std::chrono::seconds(1);
    jobs_->check_records();
  }
}

void NodeManager::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (auto w = workers_.exited(pid)) {
      worker_exited(*w, status);
      continue;
    }
    auto job = jobs_->reaped(pid, status);
    if (!job) continue;
    if (!job->rerun) {
      tell_head_job_ended(job->job);
      continue;
    }
    // The head clears the last attempt (its actors, placement groups) before the program runs
    // again, so that nothing of the new attempt is taken for the old.
    std::string id = job->job;
    tell_head([id](wire::Envelope::Builder env) { env.getBody().setRestartJob(id); },
              "job " + id + "'s program runs again", 0, [this, id] { jobs_->rerun(id); });
  }
}

// A worker process is gone: its resources and devices come back; the head hears of a hosted
// actor's loss, a lease waiting for it is told, the pool keeps its size (unless the node is fenced).
void NodeManager::worker_exited(const Worker& w, int status) {
  leases_->give_held(w);
  leases_->lessee_gone(w.id);
  res_->give_gpus(w.gpus);
  Job* job = jobs_->live(w.job_id);
  bool job_live = job != nullptr;
  if (job_live) spdlog::warn("{} (pid {}) of job {} {}; log: {}", w.id, w.pid, w.job_id, describe_exit(status), w.log);
  if (!w.actor_id.empty()) {
    hosting_->worker_gone(w, "its worker process on node " + node_id_ + " " + describe_exit(status) + " (log: " + w.log + ")");
  } else if (w.state == WState::kStarting && w.lease) {
    bool give_up = job_live && ++job->startup_failures > 3;
    leases_->queue().worker_failed(w.lease, give_up,
                           "workers of job " + w.job_id + " keep dying during start-up (last " + describe_exit(status) +
                               ", log: " + w.log + ")");
  } else if (job_live && !res_->fenced() && (w.state == WState::kLeased || w.state == WState::kIdle)) {
    // The pool keeps its size, except on a fenced node: it reopens once every worker is gone, and
    // starts workers again as leases ask for them.
    try {
      spawn_worker(w.job_id, "", 0);
    } catch (const std::exception& e) {
      spdlog::error("cannot replace {}: {}", w.id, e.what());
    }
  }
}

}  // namespace yard::sched
