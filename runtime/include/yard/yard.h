// Switchyard public API: tasks, actors and typed object references.
//
//   int add(int a, int b) { return a + b; }
//   YARD_REMOTE(add);
//
//   int main(int argc, char** argv) {
//     yard::init(argc, argv);   // joins YARD_ADDRESS, or starts an embedded local cluster
//     auto sum = yard::task(add).remote(1, 2);
//     return *sum.get() == 3 ? 0 : 1;
//   }
//
// Worker processes run the same binary: yard::init() in a worker never returns; it serves calls
// until the node manager tells it to stop. Call yard::init() first thing in main().
//
// Thread-safety: every function here may be called from any thread and from inside remote code.
#pragma once

#include <chrono>
#include <map>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "yard/codec.h"
#include "yard/object_ref.h"
#include "yard/metrics.h"
#include "yard/errors.h"
#include "yard/log.h"
#include "yard/runtime_env.h"
#include "yard/placement_group.h"
#include "yard/registry.h"

namespace yard {

// How long an actor lives: as long as its job (non-detached: it stops when the job ends), or
// until it is killed or ends itself (detached: it outlives its job). kJobDefault: what its job
// says (InitOptions::default_lifetime), as Ray's JobConfig default_actor_lifetime.
enum class Lifetime { kJobDefault, kNonDetached, kDetached };

struct InitOptions {
  // host:port of a head. Empty: YARD_ADDRESS, and if that is unset an embedded local cluster.
  std::string address;
  // Cluster token. Empty: YARD_TOKEN, else the token file of a local session with that address.
  std::string token;
  // Embedded cluster only: CPUs to offer (0: the machine's).
  int num_cpus = 0;
  // Connect/start deadline.
  Duration timeout = std::chrono::seconds(30);
  // Calls (tasks, actor calls) submitted and not yet finished, at most; at the bound, submitting
  // waits for one to finish. 0: YARD_MAX_PENDING_TASKS, else 2,000,000 (a small task costs its
  // driver about 0.7 KB beyond its arguments while pending).
  size_t max_pending_tasks = 0;
  // Where this job's actor and placement-group names live (Ray's namespace). Empty:
  // YARD_NAMESPACE (what `yard submit --namespace` sets), else the job's own, named by its id,
  // which no other job sees. Jobs that share detached actors by name name one namespace.
  std::string name_space;
  // The lifetime of this job's actors that do not choose one (ActorCreator::lifetime). kJobDefault:
  // YARD_DEFAULT_ACTOR_LIFETIME ("detached" or "non_detached"), else non-detached.
  Lifetime default_lifetime = Lifetime::kJobDefault;
};

// Connects this process to a cluster (or, in a worker process, serves calls and never returns).
// Throws ConnectionError / AuthError with the address and reason when it cannot.
void init(int argc = 0, char** argv = nullptr);
void init(const InitOptions& options, int argc = 0, char** argv = nullptr);
// Disconnects; an embedded cluster is torn down. Called at exit if the program does not.
void shutdown();
bool is_initialized();
// The address (host:port) of the cluster this process is connected to.
std::string cluster_address();

// For libraries that carry their own traffic between hosts (collective groups): the interface
// this process listens on for other nodes (its node's `--host`; loopback on a one-machine
// cluster), and key material for `purpose` derived from the cluster token (64 hex digits), or ""
// when the cluster's links are not encrypted (loopback, or YARD_CURVE=0). Different purposes get
// unrelated keys, and none of them gives away the token.
struct LinkSettings {
  std::string host;
  std::string key;
};
LinkSettings link_settings(const std::string& purpose);

// The node this process runs on (as `yard status` names it).
std::string node_id();
// The job this process works for: its driver's (as `yard status` names it).
std::string job_id();
// The namespace this process's names live in: its job's (InitOptions::name_space), in the driver
// and in every worker of the job.
std::string get_namespace();
// How many times this actor's process has been restarted (0 in its first life, in a driver, and
// in a task worker). An actor uses it to know that it must restore its state.
int restart_count();
// Ends the actor it is called in, from one of its own methods (Ray's ExitActor): it is not
// restarted, its name is free, and calls to it (the one that called this included) fail with
// ActorDied saying it ended itself. Its process exits. Throws Error outside an actor.
[[noreturn]] void exit_actor();

// How a concurrent actor's calls run (ActorCreator::max_concurrency): each on a thread of a pool,
// as Ray's max_concurrency (a call may block in anything, a std::mutex, a condition variable, a
// blocking library, and only it waits), or each on a fiber of the worker's one executor thread
// (lighter; a call must wait only in Switchyard's own waits, get() and yard::Condition, since
// anything else blocking stalls every call of the actor).
enum class Concurrency { kThreads, kFibers };

namespace detail {

// Throws InvalidArgument naming the resource (and `what`: "an actor's resources") when an amount is
// zero, negative or not finite, or above 1 and not whole (amounts below 1 share a unit).
void check_resources(const std::map<std::string, double>& r, const std::string& what);

struct TaskOptions {
  int max_retries = 3;   // re-runs after the worker crashed
  std::map<std::string, double> resources;  // held while it runs (default: one CPU)
  std::string node_id;   // node affinity
  bool soft = false;
  bool spread = false;
  std::string placement_group;
  int bundle_index = -1;
  Duration infeasible_timeout = kForever;  // how long it may wait for a node that can hold it
  std::string name;  // shown in the timeline and in its errors ("": its function's)
  RuntimeEnv runtime_env;  // added to its job's environment in the worker that runs it
};

// A named pool of an actor's calls with its own limit (ActorCreator::concurrency_group).
struct ConcurrencyGroup {
  std::string name;
  int max_concurrency = 1;
  std::vector<std::string> methods;  // registered method names whose calls run in it
};

struct ActorOptions {
  std::string name;
  std::string name_space;  // of the name ("": the creator's namespace)
  std::map<std::string, double> resources;
  int max_concurrency = 1;
  Concurrency concurrency = Concurrency::kThreads;
  std::vector<ConcurrencyGroup> groups;
  int max_restarts = 0;        // -1: unlimited
  std::string strategy;        // "" (local first, spill when busy) or "SPREAD"
  std::string node_id;         // node affinity
  bool soft = false;
  std::string placement_group;
  int bundle_index = -1;
  Lifetime lifetime = Lifetime::kJobDefault;
  Duration infeasible_timeout = kForever;
  RuntimeEnv runtime_env;      // added to its job's environment
};

class ActorState;  // defined by the runtime
using ActorPtr = std::shared_ptr<ActorState>;

Holder submit_task(const std::string& function, std::vector<Arg> args, const TaskOptions& options);
ActorPtr create_actor(const std::string& class_name, std::vector<Arg> args,
                      const ActorOptions& options);
// The live actor of that name in `name_space` ("": this process's namespace).
ActorPtr lookup_actor(const std::string& name, const std::string& class_name, const std::string& name_space = {});
// What one actor call may say of itself.
struct CallOptions {
  std::string group;  // the concurrency group it runs in ("": its method's, else the default one)
  std::string name;   // shown for it in the timeline and in its errors ("": its method's)
};
Holder submit_actor_call(const ActorPtr& actor, const std::string& method, std::vector<Arg> args,
                         const CallOptions& call = {});
void kill_actor(const ActorPtr& actor, bool restart = false);
std::string actor_id(const ActorPtr& actor);
std::string actor_class(const ActorPtr& actor);
// A handle that arrived as a value: its address is looked up on first use.
ActorPtr actor_from_id(const std::string& id, const std::string& class_name);

}  // namespace detail

// ---- tasks ----------------------------------------------------------------------------------

template <class F>
class TaskCaller {
  using traits = detail::fn_traits<F>;

 public:
  explicit TaskCaller(F fn) : name_(Registry::global().name_of_function(fn)) {}
  TaskCaller& max_retries(int n) {
    opts_.max_retries = n;
    return *this;
  }
  // What the task holds while it runs (default {"CPU": 1}; fractions allowed). A worker given
  // GPUs sees exactly its devices in CUDA_VISIBLE_DEVICES.
  TaskCaller& resources(std::map<std::string, double> r) {
    detail::check_resources(r, "a task's resources");
    opts_.resources = std::move(r);
    return *this;
  }
  // Run on this node; with soft = true, anywhere when that node is gone.
  TaskCaller& node_affinity(std::string node, bool soft = false) {
    opts_.node_id = std::move(node);
    opts_.soft = soft;
    return *this;
  }
  // Spread tasks over the nodes (the one with the most free CPUs each time) instead of filling
  // the local node first.
  TaskCaller& spread() {
    opts_.spread = true;
    return *this;
  }
  // Run inside a bundle of a placement group (-1: any bundle with room), on its resources.
  TaskCaller& placement_group(const PlacementGroup& pg, int bundle_index = -1) {
    opts_.placement_group = pg.id();
    opts_.bundle_index = bundle_index;
    return *this;
  }
  // A task no node of the cluster can hold waits for one that can (a node may join); after this
  // long its result is an InfeasibleError naming what no node has. The cluster's setting
  // `[scheduling] infeasible = "fail"` fails such a task at once instead.
  TaskCaller& infeasible_timeout(Duration d) {
    opts_.infeasible_timeout = d;
    return *this;
  }
  // The task's name in the timeline (`yard timeline`) and in its errors, instead of its function's.
  TaskCaller& name(std::string n) {
    opts_.name = std::move(n);
    return *this;
  }
  // Its worker's variables and working directory, beyond its job's (yard/runtime_env.h): it runs
  // in a worker started with them, which runs only tasks that ask for the same. Throws
  // InvalidArgument for one RuntimeEnv::check refuses.
  TaskCaller& runtime_env(RuntimeEnv env) {
    env.check();
    opts_.runtime_env = std::move(env);
    return *this;
  }
  template <class... A>
  ObjectRef<detail::ret_t<typename traits::result>> remote(A&&... a) {
    static_assert(sizeof...(A) == traits::arity, "wrong number of arguments for this function");
    auto args = detail::make_args<typename traits::params>(std::index_sequence_for<A...>{},
                                                           std::forward<A>(a)...);
    return ObjectRef<detail::ret_t<typename traits::result>>(
        detail::submit_task(name_, std::move(args), opts_));
  }

 private:
  std::string name_;
  detail::TaskOptions opts_;
};

template <class R, class... P>
TaskCaller<R (*)(P...)> task(R (*fn)(P...)) {
  return TaskCaller<R (*)(P...)>(fn);
}

// ---- actors ---------------------------------------------------------------------------------

namespace detail {
// The registered name of actor class T's method (the registry's entries stay put). Throws
// NotFoundError when T or the method is not registered.
template <class T, class M>
const std::string& method_name(M method) {
  const auto* cls = Registry::global().actor_class(typeid(T));
  if (!cls) throw NotFoundError("actor class is not registered with YARD_ACTOR");
  auto it = cls->method_by_key.find(key_bytes(method));
  if (it == cls->method_by_key.end()) throw NotFoundError("method is not registered for actor class " + cls->name);
  return it->second;
}
}  // namespace detail

template <class T>
class ActorHandle;

template <class T, class M>
class MethodCaller {
  using traits = detail::fn_traits<M>;

 public:
  MethodCaller(detail::ActorPtr a, std::string method) : a_(std::move(a)), method_(std::move(method)) {}
  // Runs this call in the actor's concurrency group `name` instead of its method's.
  MethodCaller& group(std::string name) {
    call_.group = std::move(name);
    return *this;
  }
  // The call's name in the timeline (`yard timeline`) and in its errors, instead of its method's.
  MethodCaller& name(std::string n) {
    call_.name = std::move(n);
    return *this;
  }
  template <class... A>
  ObjectRef<detail::ret_t<typename traits::result>> remote(A&&... a) {
    static_assert(sizeof...(A) == traits::arity, "wrong number of arguments for this method");
    auto args = detail::make_args<typename traits::params>(std::index_sequence_for<A...>{},
                                                           std::forward<A>(a)...);
    return ObjectRef<detail::ret_t<typename traits::result>>(
        detail::submit_actor_call(a_, method_, std::move(args), call_));
  }

 private:
  detail::ActorPtr a_;
  std::string method_;
  detail::CallOptions call_;
};

template <class T>
class ActorHandle {
 public:
  ActorHandle() = default;
  explicit ActorHandle(detail::ActorPtr a) : a_(std::move(a)) {}

  // Calls go straight to the actor's worker, in the order they are made.
  template <class M>
  MethodCaller<T, M> call(M method) const {
    // The registered name of the method this thread called last (the registry's entries stay put):
    // a loop of calls to one method looks it up once.
    thread_local M last_method{};
    thread_local const std::string* last_name = nullptr;
    if (!last_name || !(last_method == method)) {
      last_name = &detail::method_name<T>(method);
      last_method = method;
    }
    return MethodCaller<T, M>(a_, *last_name);
  }
  std::string id() const { return detail::actor_id(a_); }
  std::string class_name() const { return detail::actor_class(a_); }
  // Kills the actor's process; pending and later calls fail with ActorDied. With no_restart =
  // false, an actor that has restarts left (max_restarts) is restarted instead, as after a crash:
  // calls it was running fail with ActorRestarting, later ones go to its new process.
  void kill(bool no_restart = true) const { detail::kill_actor(a_, !no_restart); }

 private:
  detail::ActorPtr a_;
};

// Actor handles are values: pass them to tasks and actors, return them from calls.
template <class T>
struct Codec<ActorHandle<T>> {
  static detail::Bytes encode(const ActorHandle<T>& h) {
    return Codec<std::tuple<std::string, std::string>>::encode({h.id(), h.class_name()});
  }
  static ActorHandle<T> decode(const char* data, size_t size) {
    auto [id, cls] = Codec<std::tuple<std::string, std::string>>::decode(data, size);
    return ActorHandle<T>(detail::actor_from_id(id, cls));
  }
};

}  // namespace yard
// msgpack adaptor so actor handles nest inside vectors, maps and YARD_FIELDS structs too.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {
template <class T>
struct convert<yard::ActorHandle<T>> {
  const msgpack::object& operator()(const msgpack::object& o, yard::ActorHandle<T>& v) const {
    auto p = o.as<std::pair<std::string, std::string>>();
    v = yard::ActorHandle<T>(yard::detail::actor_from_id(p.first, p.second));
    return o;
  }
};
template <class T>
struct pack<yard::ActorHandle<T>> {
  template <class Stream>
  msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o, const yard::ActorHandle<T>& v) const {
    return o.pack(std::make_pair(v.id(), v.class_name()));
  }
};
}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
namespace yard {

template <class T>
class ActorCreator {
 public:
  explicit ActorCreator(std::vector<detail::Arg> args) : args_(std::move(args)) {}
  // A name, unique among the live actors of a namespace: this process's (get_namespace()), or
  // the one given (Ray's SetName(name, namespace)).
  ActorCreator& name(std::string n, std::string name_space = {}) {
    opts_.name = std::move(n);
    opts_.name_space = std::move(name_space);
    return *this;
  }
  // What the actor holds while it lives (checked as a task's are).
  ActorCreator& resources(std::map<std::string, double> r) {
    detail::check_resources(r, "an actor's resources");
    opts_.resources = std::move(r);
    return *this;
  }
  // Runs up to n calls at once, each on a thread of its own (Ray's meaning), or on fibers.
  ActorCreator& max_concurrency(int n, Concurrency how = Concurrency::kThreads) {
    if (n < 1) throw InvalidArgument("max_concurrency must be at least 1 (got " + std::to_string(n) + ")");
    opts_.max_concurrency = n;
    opts_.concurrency = how;
    return *this;
  }
  // A named pool of calls with its own limit, beside the default one of max_concurrency: calls of
  // the methods given run there (and any call that names the group: call(&C::m).group(name)).
  // Runs on threads, or on fibers when max_concurrency says so.
  template <class... M>
  ActorCreator& concurrency_group(std::string name, int max_concurrency, M... methods) {
    if (name.empty()) throw InvalidArgument("a concurrency group needs a name");
    if (max_concurrency < 1)
      throw InvalidArgument("concurrency group '" + name + "': max_concurrency must be at least 1 (got " +
                            std::to_string(max_concurrency) + ")");
    for (auto& g : opts_.groups)
      if (g.name == name) throw InvalidArgument("concurrency group '" + name + "' is declared twice");
    opts_.groups.push_back({std::move(name), max_concurrency, {detail::method_name<T>(methods)...}});
    return *this;
  }
  // Restarts after its process or node is lost (-1: without limit). Calls running at that moment
  // fail with ActorRestarting; later calls go to the new process.
  ActorCreator& max_restarts(int n) {
    opts_.max_restarts = n;
    return *this;
  }
  // Spread actors over the nodes instead of filling the local node first.
  ActorCreator& spread() {
    opts_.strategy = "SPREAD";
    return *this;
  }
  // Run on this node; with soft = true, elsewhere when that node cannot take it.
  ActorCreator& node_affinity(std::string node, bool soft = false) {
    opts_.node_id = std::move(node);
    opts_.soft = soft;
    return *this;
  }
  // Run inside a bundle of a placement group (-1: any bundle with room).
  ActorCreator& placement_group(const PlacementGroup& pg, int bundle_index = -1) {
    opts_.placement_group = pg.id();
    opts_.bundle_index = bundle_index;
    return *this;
  }
  // Outlive the job that creates it (stop it with kill()): lifetime(Lifetime::kDetached).
  ActorCreator& detached() { return lifetime(Lifetime::kDetached); }
  // Live as long as the job (kNonDetached) or beyond it (kDetached); by default, as its job says.
  ActorCreator& lifetime(Lifetime l) {
    opts_.lifetime = l;
    return *this;
  }
  // An actor no node can hold waits for one that can; after this long it is dead and its calls
  // fail with InfeasibleError (as a task's infeasible_timeout).
  ActorCreator& infeasible_timeout(Duration d) {
    opts_.infeasible_timeout = d;
    return *this;
  }
  // Its process's variables and working directory, beyond its job's (yard/runtime_env.h).
  // Throws InvalidArgument for one RuntimeEnv::check refuses.
  ActorCreator& runtime_env(RuntimeEnv env) {
    env.check();
    opts_.runtime_env = std::move(env);
    return *this;
  }
  // Starts the actor. Returns at once; calls made before it is up wait for it.
  ActorHandle<T> remote() {
    const auto* cls = Registry::global().actor_class(typeid(T));
    if (!cls) throw NotFoundError("actor class is not registered with YARD_ACTOR");
    return ActorHandle<T>(detail::create_actor(cls->name, std::move(args_), opts_));
  }

 private:
  std::vector<detail::Arg> args_;
  detail::ActorOptions opts_;
};

template <class T, class... A>
ActorCreator<T> actor(A&&... ctor_args) {
  [[maybe_unused]] const auto* cls = Registry::global().actor_class(typeid(T));
  [[maybe_unused]] size_t i = 0;
  // Whether the next parameter takes a ref (a braced list is evaluated in order).
  [[maybe_unused]] auto takes_ref = [&] {
    size_t k = i++;
    return !cls || k >= cls->ref_params.size() || cls->ref_params[k];
  };
  std::vector<detail::Arg> args{detail::make_ctor_arg(std::forward<A>(ctor_args), takes_ref())...};
  return ActorCreator<T>(std::move(args));
}

// Looks up a named actor in a namespace (this process's when none is given). Throws
// NotFoundError if there is none there, or if it has another class.
template <class T>
ActorHandle<T> get_actor(const std::string& name, const std::string& name_space = {}) {
  const auto* cls = Registry::global().actor_class(typeid(T));
  if (!cls) throw NotFoundError("actor class is not registered with YARD_ACTOR");
  return ActorHandle<T>(detail::lookup_actor(name, cls->name, name_space));
}

template <class T>
void kill(const ActorHandle<T>& h, bool no_restart = true) {
  h.kill(no_restart);
}

}  // namespace yard
