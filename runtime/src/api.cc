// The public API's entry points: init, shutdown, and the detail:: functions the templates call.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <spdlog/spdlog.h>

#include "yard/internal/allocator.h"
#include "core_worker.h"
#include "link_limits.h"
#include "link_security.h"
#include "submit/pending_calls.h"
#include "yard/process.h"
#include "yard/internal/session.h"
#include "yard/internal/control_client.h"
#include "yard/yard.h"

namespace yard {
namespace detail {

namespace {
std::mutex g_mu;
std::unique_ptr<CoreWorker> g_worker;         // guarded by g_mu for (re)assignment
std::atomic<CoreWorker*> g_current{nullptr};
pid_t g_embedded_pid = 0;
std::string g_embedded_dir;
std::string g_address;
// cluster_control()'s, guarded by g_control_mu (not g_mu: a worker's init() holds that while it
// serves calls, and the calls use this).
std::mutex g_control_mu;
std::shared_ptr<ControlClient> g_control;

CoreWorker& rt() {
  auto* w = g_current.load();
  if (!w) throw Error("yard::init() has not been called");
  return *w;
}

// Starts `yard start --head --block` as a child that dies with this process; returns its address.
// Whether the job's actors that choose no lifetime outlive it: as the program says, else as
// YARD_DEFAULT_ACTOR_LIFETIME says; an unknown value there is refused.
bool default_detached(Lifetime given) {
  if (given != Lifetime::kJobDefault) return given == Lifetime::kDetached;
  const char* e = getenv("YARD_DEFAULT_ACTOR_LIFETIME");
  std::string v = e ? e : "";
  if (v.empty() || v == "non_detached") return false;
  if (v == "detached") return true;
  throw InvalidArgument("YARD_DEFAULT_ACTOR_LIFETIME is '" + v + "': say detached or non_detached");
}

std::string start_embedded(const InitOptions& o) {
  std::string yard_bin = find_yard_binary();
  std::filesystem::create_directories(yard_home());
  std::string tmpl = yard_home() + "/embedded-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw ConnectionError("cannot create a session directory under " + yard_home());
  g_embedded_dir = buf.data();
  std::vector<std::string> argv = {yard_bin, "start", "--head", "--block", "--embedded",
                                   "--port", "0", "--session-dir", g_embedded_dir};
  if (o.num_cpus > 0) {
    argv.push_back("--num-cpus");
    argv.push_back(std::to_string(o.num_cpus));
  }
  SpawnOptions so;
  so.death_signal = SIGTERM;
  so.env["YARD_PARENT_PID"] = std::to_string(getpid());
  auto [pid, line] = spawn_ready(argv, so, std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout));
  g_embedded_pid = pid;
  if (line.empty()) {
    terminate(g_embedded_pid, SIGTERM, std::chrono::seconds(2));
    g_embedded_pid = 0;
    throw ConnectionError("the embedded cluster (" + yard_bin + ") did not start within " +
                          std::to_string(o.timeout.count()) + " ms; see its messages above");
  }
  return line;
}

void at_exit() { shutdown(); }
}  // namespace

CoreWorker* current() { return g_current.load(); }

ObjectHolder::~ObjectHolder() {
  if (auto* w = g_current.load()) w->release(id_, owner_);
}

std::pair<std::string, std::string> export_ref(const Holder& h) {
  if (!h) throw Error("cannot pass an empty ObjectRef");
  return rt().export_ref(h);
}
Holder import_ref(const std::string& id, const std::string& owner) { return rt().import_ref(id, owner); }

Holder submit_task(const std::string& function, std::vector<Arg> args, const TaskOptions& options) {
  return rt().submit_task(function, std::move(args), options);
}
Holder put_bytes(Bytes value) { return rt().put(std::move(value)); }
Bytes get_bytes(const std::string& id, Duration timeout) { return rt().get(id, timeout); }
std::vector<size_t> wait_ids(const std::vector<std::string>& ids, size_t num_returns, Duration timeout) {
  return rt().wait(ids, num_returns, timeout);
}
std::vector<Bytes> get_all_bytes(const std::vector<std::string>& ids, Duration timeout) {
  return rt().get_all(ids, timeout);
}
ActorPtr create_actor(const std::string& class_name, std::vector<Arg> args, const ActorOptions& options) {
  return rt().create_actor(class_name, std::move(args), options);
}
ActorPtr lookup_actor(const std::string& name, const std::string& class_name, const std::string& name_space) {
  return rt().lookup_actor(name, class_name, name_space);
}
Holder submit_actor_call(const ActorPtr& actor, const std::string& method, std::vector<Arg> args,
                         const CallOptions& call) {
  if (!actor) throw Error("call on an empty actor handle");
  return rt().submit_actor_call(actor, method, std::move(args), call);
}
void kill_actor(const ActorPtr& actor, bool restart) {
  if (!actor) throw Error("kill on an empty actor handle");
  rt().kill_actor(actor, restart);
}
std::string actor_id(const ActorPtr& actor) { return actor ? actor->id : std::string(); }
std::string actor_class(const ActorPtr& actor) { return actor ? actor->class_name : std::string(); }
ActorPtr actor_from_id(const std::string& id, const std::string& class_name) {
  return rt().actor_from_id(id, class_name);
}

}  // namespace detail

void init(int argc, char** argv) { init(InitOptions{}, argc, argv); }

void init(const InitOptions& options, int argc, char** argv) {
  using namespace detail;
  std::lock_guard<std::mutex> l(g_mu);
  if (g_current.load()) return;
  if (const char* lvl = getenv("YARD_LOG_LEVEL")) spdlog::set_level(spdlog::level::from_str(lvl));
  configure_allocator();  // allocator_jemalloc.cc: freed memory is kept for reuse unless YARD_MALLOC_RETAIN=0
  // A driver talks to every node that hosts one of its actors: a connection (and a few
  // descriptors) each, past the usual soft limit of 1,024 on a large cluster.
  raise_descriptor_limit();
  PendingCalls::instance().set_limit(options.max_pending_tasks ? options.max_pending_tasks : default_pending_limit());
  if (const char* w = getenv("YARD_WORKER"); w && std::string(w) == "1") {
    WorkerConfig cfg;
    auto env = [](const char* k) { const char* v = getenv(k); return std::string(v ? v : ""); };
    cfg.node_address = env("YARD_NODE_ADDRESS");
    cfg.token = env("YARD_TOKEN");
    cfg.job_id = env("YARD_JOB_ID");
    cfg.name_space = env("YARD_NAMESPACE");
    cfg.worker_id = env("YARD_WORKER_ID");
    cfg.actor_id = env("YARD_ACTOR_ID");
    cfg.head_address = env("YARD_HEAD_ADDRESS");
    cfg.node_id = env("YARD_NODE_ID");
    cfg.bind_host = env("YARD_NODE_HOST");
    // Before any thread starts: SIGTERM waits for the worker's own handler (Worker::run).
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
    auto* w_ptr = new Worker(cfg);
    g_current.store(w_ptr);
    w_ptr->run();  // never returns
  }
  // Checked before a cluster is started or joined.
  bool detached_actors = default_detached(options.default_lifetime);
  std::string address = options.address;
  std::string token = options.token;
  if (address.empty())
    if (const char* a = getenv("YARD_ADDRESS"); a && *a) address = a;
  if (address.empty()) {
    address = start_embedded(options);
    auto space = address.find(' ');
    std::string token_file = space == std::string::npos ? "" : address.substr(space + 1);
    address = address.substr(0, space);
    if (token.empty()) token = read_token(token_file);
  }
  Endpoint ep = resolve_endpoint(address, token);
  std::string name_space = options.name_space;
  if (name_space.empty())
    if (const char* n = getenv("YARD_NAMESPACE"); n && *n) name_space = n;
  try {
    // A head and its standbys: the first that registers the driver (a standby refuses).
    auto heads = address_list(ep.address);
    for (size_t k = 0; !g_worker; ++k) {
      try {
        g_worker = std::make_unique<Driver>(heads.at(k), ep.token, options.timeout, name_space, detached_actors);
        ep.address = heads[k];
      } catch (const ConnectionError&) {
        if (k + 1 >= heads.size()) throw;
      }
    }
  } catch (...) {
    if (g_embedded_pid) {
      terminate(g_embedded_pid, SIGTERM, std::chrono::seconds(5));
      g_embedded_pid = 0;
    }
    throw;
  }
  g_address = ep.address;
  g_current.store(g_worker.get());
  static bool registered = false;
  if (!registered) {
    std::atexit(at_exit);
    registered = true;
  }
}

void shutdown() {
  using namespace detail;
  std::lock_guard<std::mutex> l(g_mu);
  auto* w = g_current.exchange(nullptr);
  if (!w) return;
  if (g_worker.get() == w) {
    g_worker->disconnect();
    g_worker.reset();
  }
  if (g_embedded_pid) {
    terminate(g_embedded_pid, SIGTERM, std::chrono::seconds(10));
    g_embedded_pid = 0;
    // Its logs are kept (the newest sessions' under $YARD_HOME/logs/), so that a failed run can
    // be looked into afterwards; its sockets, spilled objects and blobs go.
    keep_session_logs(g_embedded_dir);
    std::error_code ec;
    std::filesystem::remove_all(g_embedded_dir, ec);
  }
  g_address.clear();
  std::lock_guard<std::mutex> lc(g_control_mu);
  g_control.reset();
}

namespace detail {
ControlStoreAccess cluster_control_access() { return rt().head().control_store(); }

std::shared_ptr<ControlClient> cluster_control() {
  std::lock_guard<std::mutex> l(g_control_mu);
  if (!g_current.load()) throw Error("not connected to a cluster: call yard::init() first");
  if (!g_control)
    // Asked of the process's cluster when a connection is made, so that a client kept past
    // shutdown() fails with that error instead of reaching a cluster that is gone.
    g_control = std::make_shared<ControlClient>(cluster_control_access);
  return g_control;
}
}  // namespace detail

LinkSettings link_settings(const std::string& purpose) {
  auto& rt = detail::rt();
  LinkSettings s;
  s.host = sys::split_address(rt.listen_address()).first;
  if (detail::curve_for_host(s.host)) s.key = detail::link_key_for(rt.token(), purpose);
  return s;
}

std::string node_id() { return detail::rt().node_id(); }
std::string job_id() { return detail::rt().job_id(); }
std::string get_namespace() { return detail::rt().name_space(); }

void exit_actor() {
  const char* id = getenv("YARD_ACTOR_ID");
  if (!getenv("YARD_WORKER") || !id || !*id) throw Error("yard::exit_actor() ends an actor from one of its own methods");
  detail::rt().head().end_actor(id, "it ended itself (yard::exit_actor)");
  std::fflush(nullptr);
  _exit(0);
}

int restart_count() {
  const char* r = getenv("YARD_ACTOR_RESTARTS");
  return r && getenv("YARD_WORKER") ? atoi(r) : 0;
}

static_assert(static_cast<int>(wire::PlacementStrategy::STRICT_SPREAD) == static_cast<int>(PlacementStrategy::kStrictSpread) &&
              static_cast<int>(wire::PlacementStrategy::STRICT_PACK) == static_cast<int>(PlacementStrategy::kStrictPack) &&
              static_cast<int>(wire::PlacementStrategy::SPREAD) == static_cast<int>(PlacementStrategy::kSpread));

namespace detail {

void check_resources(const std::map<std::string, double>& r, const std::string& what) {
  for (auto& [name, amount] : r) {
    std::string why;
    if (!std::isfinite(amount)) why = "is not a number";
    else if (amount <= 0) why = "must be above 0";
    else if (amount > 1 && amount != std::floor(amount)) why = "above 1 must be a whole number";
    if (!why.empty())
      throw InvalidArgument(what + ": the amount of " + name + " (" + fmt::format("{}", amount) + ") " + why);
  }
}

}  // namespace detail

PlacementGroup placement_group(std::vector<Bundle> bundles, PlacementStrategy strategy, const std::string& name) {
  if (bundles.empty()) throw InvalidArgument("a placement group needs at least one bundle");
  for (size_t i = 0; i < bundles.size(); ++i) {
    if (bundles[i].empty()) throw InvalidArgument("placement group bundle " + std::to_string(i) + " asks for nothing");
    detail::check_resources(bundles[i], "placement group bundle " + std::to_string(i));
  }
  PlacementGroup g;
  g.id_ = "pg-" + detail::random_hex(8);
  g.bundles_ = std::move(bundles);
  g.created_ = std::make_shared<std::atomic<bool>>(
      detail::rt().head().create_placement_group(g.id_, static_cast<wire::PlacementStrategy>(strategy), g.bundles_, name));
  return g;
}

bool PlacementGroup::wait(std::chrono::milliseconds timeout) const {
  if (created_ && created_->load()) return true;
  bool ok = detail::rt().head().wait_placement_group(id_, timeout).first == states::GroupState::kCreated;
  if (ok && created_) created_->store(true);
  return ok;
}

std::vector<std::string> PlacementGroup::bundle_nodes() const {
  return detail::rt().head().wait_placement_group(id_, std::chrono::milliseconds(0)).second;
}

void PlacementGroup::remove() const { detail::rt().head().remove_placement_group(id_); }

bool is_initialized() { return detail::g_current.load() != nullptr; }
std::string cluster_address() { return detail::g_address; }

}  // namespace yard
