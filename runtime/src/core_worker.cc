#include "core_worker.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "yard/internal/allocator.h"
#include "metrics/metrics_registry.h"
#include "metrics/task_events.h"

#include <spdlog/spdlog.h>

#include "objects/node_memory.h"
#include "submit/pending_calls.h"
#include "objects/shm_store.h"
#include "yard/process.h"

namespace yard::detail {

CoreWorker::CoreWorker(std::string token, std::string lease_address, std::string head_address, std::string node_id,
                       std::string job_id)
    : token_(std::move(token)), lease_address_(std::move(lease_address)), head_address_(std::move(head_address)),
      node_id_(std::move(node_id)), job_id_(std::move(job_id)), id_prefix_(id_prefix()) {}

void CoreWorker::disconnect() {
  if (!io_) return;
  io_.close();
}

// Ids are short enough to live inside a std::string (15 characters at most): making, copying,
// hashing and comparing one allocates nothing. A process's ids are its prefix of 8 random
// characters (47 bits), then its count in base 62 (up to 7 characters: 3.5 trillion ids).
namespace {
constexpr char kDigits62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
}  // namespace

std::string CoreWorker::id_prefix() {
  std::string hex = random_hex(8), s;
  uint64_t bits = std::stoull(hex, nullptr, 16);
  for (int i = 0; i < 8; ++i, bits /= 62) s.push_back(kDigits62[bits % 62]);
  return s;
}

std::string CoreWorker::new_id() {
  uint64_t n = id_seq_.fetch_add(1, std::memory_order_relaxed);
  char digits[16];
  int k = 0;
  do {
    digits[k++] = kDigits62[n % 62];
    n /= 62;
  } while (n > 0);
  char id[24];
  size_t len = id_prefix_.size();
  std::memcpy(id, id_prefix_.data(), len);
  while (k > 0) id[len++] = digits[--k];
  return std::string(id, len);
}

// ---- objects ----------------------------------------------------------------------------------

Holder CoreWorker::put(Bytes value) {
  std::string id = new_id();
  store_.create(id);
  store_.set_value(id, std::move(value));
  return std::make_shared<ObjectHolder>(id);
}

Bytes CoreWorker::get(const std::string& id, std::chrono::milliseconds timeout) {
  ownership_.ensure_fetched(id);
  return store_.get(id, timeout);
}

std::vector<Bytes> CoreWorker::get_all(const std::vector<std::string>& ids, std::chrono::milliseconds timeout) {
  for (auto& id : ids) ownership_.ensure_fetched(id);
  return store_.get_all(ids, timeout);
}

std::vector<size_t> CoreWorker::wait(const std::vector<std::string>& ids, size_t num,
                                     std::chrono::milliseconds t) {
  for (auto& id : ids) ownership_.ensure_fetched(id);
  return store_.wait(ids, num, t);
}

std::pair<std::string, std::string> CoreWorker::export_ref(const Holder& h) { return ownership_.export_ref(h); }

Holder CoreWorker::import_ref(const std::string& id, const std::string& owner) {
  return ownership_.import_ref(id, owner);
}

void CoreWorker::release(const std::string& id, const std::string& owner) { ownership_.release(id, owner); }

// Every 50 ms: spans of tasks that just ran go to the node at once (a worker killed when its job
// ends loses none of them); every 500 ms the rest.
void CoreWorker::housekeeping() {
  if (++ticks_ % 10 != 0) {
    if (TaskEvents::instance().pending()) report_metrics(false);
    return;
  }
  tasks_.return_idle_leases();
  ShmPool::instance().trim();
  trim_heap();
  report_metrics(true);
}

// A submission counted under its label: the function, or Class.method for an actor's method or
// creation. A submitting thread keeps the series of the last label it counted, so a stream of
// like submissions neither builds the label nor looks it up.
void CoreWorker::count_submitted(const std::string& cls, const std::string& name) {
  auto& r = metrics::detail::Registry::instance();
  if (!r.enabled()) return;
  thread_local struct {
    std::string cls, name;
    metrics::detail::Registry::TaskSeries* series = nullptr;
  } last;
  if (!last.series || last.name != name || last.cls != cls) {
    last.series = r.task_series(cls.empty() ? name : cls + "." + name);
    last.cls = cls;
    last.name = name;
  }
  r.task_submitted(last.series);
}

void CoreWorker::describe_process(wire::MetricsReport::Builder r) {
  r.setPid(static_cast<int32_t>(getpid()));
  r.setJob(job_id_);
  r.setWorker(process_label_);
}

// The report: the metrics when `series` and they changed (or `force`), and the waiting spans.
// False when there is nothing to send.
bool CoreWorker::fill_report(wire::MetricsReport::Builder report, bool series, bool force) {
  auto& r = metrics::detail::Registry::instance();
  bool any = series && r.enabled() && r.write_report(report, force);
  any |= r.enabled() && TaskEvents::instance().write(report);
  if (any) describe_process(report);
  return any;
}

// A worker asked to stop: its last values and spans, then it exits (when they have arrived).
void Worker::final_report() {
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  if (lease_address_.empty() || !fill_report(m.env().getBody().initReportMetrics(), true, false)) _exit(0);
  io_->request(lease_address_, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) { _exit(0); },
               std::chrono::milliseconds(400));
}

// A driver that ends sends its last values and waits (briefly) for them to arrive.
void CoreWorker::flush_metrics() {
  if (lease_address_.empty()) return;
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  if (!fill_report(m.env().getBody().initReportMetrics(), true, false)) return;
  try {
    io_->call(lease_address_, m, rid, std::chrono::seconds(2));
  } catch (const std::exception&) {
  }
}

// What changed in this process's metrics goes to its node manager (which serves Prometheus).
void CoreWorker::report_metrics(bool with_series) {
  auto& r = metrics::detail::Registry::instance();
  if (!r.enabled() || lease_address_.empty()) return;
  if (with_series) r.set(metrics::detail::Builtin::get().shm_bytes, {}, double(ShmPool::instance().stats().bytes));
  uint64_t rid = io_->next_request_id();
  OutMessage m(token_, rid, false);
  // Unchanged values too every 5 s: the node takes a process silent for 15 s as gone.
  auto now = std::chrono::steady_clock::now();
  bool force = now - last_report_ >= std::chrono::seconds(5);
  auto report = m.env().getBody().initReportMetrics();
  if (!fill_report(report, with_series || force, force)) return;
  if (report.hasSeries()) last_report_ = now;
  io_->request(lease_address_, rid, m.finish(), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
               std::chrono::seconds(5));
}

TaskSpec::TaskSpec() { PendingCalls::instance().enter(); }  // waits while the process is at its bound
TaskSpec::~TaskSpec() { PendingCalls::instance().leave(); }

std::shared_ptr<TaskSpec> CoreWorker::make_spec(std::string fn, std::vector<Arg> args) {
  auto spec = std::make_shared<TaskSpec>();
  spec->seq = id_seq_.load(std::memory_order_relaxed);
  spec->id = new_id();
  spec->function = std::move(fn);
  spec->args = std::move(args);
  store_.create(spec->id);
  return spec;
}

// ---- tasks and actors -------------------------------------------------------------------------

Holder CoreWorker::submit_task(const std::string& function, std::vector<Arg> args, const TaskOptions& o) {
  count_submitted({}, function);
  auto spec = make_spec(function, std::move(args));
  spec->name = o.name;
  auto holder = std::make_shared<ObjectHolder>(spec->id);
  tasks_.submit(spec, o);
  return holder;
}

ActorPtr CoreWorker::create_actor(const std::string& cls, std::vector<Arg> args, const ActorOptions& o) {
  count_submitted(cls, "create");
  return actors_.create(cls, std::move(args), o);
}
ActorPtr CoreWorker::lookup_actor(const std::string& name, const std::string& cls, const std::string& name_space) {
  return actors_.lookup(name, cls, name_space);
}
ActorPtr CoreWorker::actor_from_id(const std::string& id, const std::string& cls) { return actors_.from_id(id, cls); }
Holder CoreWorker::submit_actor_call(const ActorPtr& a, const std::string& method, std::vector<Arg> args,
                                     const CallOptions& call) {
  count_submitted(a->class_name, method);
  return actors_.call(a, method, std::move(args), call);
}
void CoreWorker::kill_actor(const ActorPtr& a, bool restart) { actors_.kill(a, restart); }

// ---- the two kinds of process -----------------------------------------------------------------

Driver::Driver(const std::string& address, const std::string& token, std::chrono::milliseconds timeout,
               const std::string& name_space, bool detached_actors)
    : CoreWorker(token, address, address, "", "") {
  name_space_ = name_space;
  // Reachable from the cluster: loopback for a local head, else the interface toward the head
  // (YARD_HOST overrides).
  const char* host_env = getenv("YARD_HOST");
  std::string bind_host = host_env && *host_env ? host_env : local_ip_toward(split_address(address).first);
  io_.open(std::make_unique<IoLoop>(bind_host, 0, token_, [this](IoLoop::Incoming in) {
    if (ownership_.serve(in)) return;
    OutMessage m(token_, in.msg->env().getRequestId(), true);
    set_error(m.env(), wire::ErrorCode::NOT_FOUND, "a driver serves only its objects");
    io_.reply(in.routing_id, m.finish());
  }));
  auto reg = head_client_.register_driver(timeout, detached_actors);
  job_id_ = reg.job_id;
  if (name_space_.empty()) name_space_ = job_id_;  // the job's own
  node_id_ = reg.node_id;
  // Leases go to the node manager the head named; actors, groups and the job's end to the head.
  if (!reg.node_address.empty()) lease_address_ = reg.node_address;
  store_.attach_node_memory(NodeMemory::attach(node_id_));  // when its node is on this host
  io_->post([this] { io_->every(std::chrono::milliseconds(50), [this] { housekeeping(); }); });
}

void Driver::disconnect() {
  if (io_) flush_metrics();
  if (io_) io_->closing();  // ending the job stops its workers: their calls are not retried
  if (io_ && !job_id_.empty()) head_client_.finish_job();
  CoreWorker::disconnect();
}

Worker::Worker(WorkerConfig cfg)
    : CoreWorker(cfg.token, cfg.node_address, cfg.head_address.empty() ? cfg.node_address : cfg.head_address,
                 cfg.node_id, cfg.job_id),
      cfg_(std::move(cfg)) {
  process_label_ = cfg_.worker_id;
  name_space_ = cfg_.name_space.empty() ? cfg_.job_id : cfg_.name_space;
}

void Worker::run() {
  // The node stops a worker with SIGTERM (its job ended, its actor was killed): what its metrics
  // and timeline still hold goes to the node, then it exits (at most half a second later; the
  // node kills it after a second). SIGTERM is blocked in every thread (yard::init) but this one.
  std::thread([this] {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    int sig = 0;
    sigwait(&term, &sig);
    if (executor_) executor_->stop_serving();
    if (io_) io_->post([this] { final_report(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    _exit(0);
  }).detach();
  executor_ = std::make_unique<TaskExecutor>(io_, ownership_, token_, cfg_);
  store_.attach_node_memory(NodeMemory::attach(cfg_.node_id));
  executor_->run([this] { housekeeping(); });
}

}  // namespace yard::detail
