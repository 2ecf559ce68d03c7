#include "execute/task_executor.h"

#include "metrics/metrics_registry.h"
#include "metrics/task_events.h"

#include <algorithm>
#include <cxxabi.h>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <unistd.h>

#include <boost/fiber/all.hpp>
#include <spdlog/spdlog.h>

#include "core_worker.h"
#include "execute/call_log.h"
#include "execute/call_pools.h"
#include "objects/memory_store.h"
#include "objects/shm_store.h"
#include "yard/process.h"

namespace yard::detail {

namespace {

constexpr auto kRegisterTimeout = std::chrono::seconds(30);

// YARD_TESTING_DELAY_MS="Label=ms,Label=ms": the calls of those functions (or Class.method) wait
// that long before they run, so that a fault test can land a kill inside a phase that is
// otherwise over in milliseconds (a chaos-testing knob, as Ray's testing_asio_delay_us).
std::chrono::milliseconds testing_delay(const std::string& label) {
  static const std::map<std::string, std::chrono::milliseconds> delays = [] {
    std::map<std::string, std::chrono::milliseconds> m;
    const char* e = std::getenv("YARD_TESTING_DELAY_MS");
    if (!e || !*e) return m;
    std::string s = e;
    for (size_t at = 0; at < s.size();) {
      size_t end = s.find(',', at);
      if (end == std::string::npos) end = s.size();
      auto item = s.substr(at, end - at);
      auto eq = item.rfind('=');
      if (eq == std::string::npos) {
        spdlog::warn("YARD_TESTING_DELAY_MS: '{}' is not Label=ms; ignored", item);
      } else {
        m[item.substr(0, eq)] = std::chrono::milliseconds(std::atol(item.c_str() + eq + 1));
        spdlog::warn("testing: calls of {} wait {} ms before they run (YARD_TESTING_DELAY_MS)", item.substr(0, eq),
                     std::atol(item.c_str() + eq + 1));
      }
      at = end + 1;
    }
    return m;
  }();
  if (delays.empty()) return {};
  auto it = delays.find(label);
  return it == delays.end() ? std::chrono::milliseconds(0) : it->second;
}

// The largest result or error text that joins a group of replies (call_port.h); a larger one
// travels alone. A group is sent once half a batch, so it stays under a batch's size.
size_t grouped_bytes() {
  static const size_t n = std::min<size_t>(16 * 1024, batch_cap() / 4);
  return n;
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  free(d);
  return s;
}

}  // namespace

struct TaskExecutor::State {
  boost::fibers::buffered_channel<IoLoop::Incoming> channel{4096};
  std::shared_ptr<void> actor;
  const ActorClass* cls = nullptr;
  std::unique_ptr<CallPools> pools;  // a concurrent actor's: its calls run there
  bool threads = false;              // ... on threads (calls find their callee under callee_mu)
  std::mutex callee_mu;
  std::string location_suffix;  // " on worker W (pid P, host H)", in every error's location
};

TaskExecutor::TaskExecutor(Channel& io, Ownership& ownership, std::string token,
                           const WorkerConfig& cfg)
    : io_(io), ownership_(ownership), token_(std::move(token)), worker_id_(cfg.worker_id),
      node_address_(cfg.node_address), bind_host_(cfg.bind_host.empty() ? "127.0.0.1" : cfg.bind_host),
      s_(std::make_unique<State>()) {
  s_->location_suffix = " on worker " + worker_id_ + " (pid " + std::to_string(getpid()) + ", host " + hostname() + ")";
}

TaskExecutor::~TaskExecutor() = default;

void TaskExecutor::handle(IoLoop::Incoming in) {
  if (stopping_.load(std::memory_order_relaxed)) return;  // stopped: as good as gone
  if (ownership_.serve(in)) return;
  switch (in.msg->env().getBody().which()) {
    case wire::Envelope::Body::PUSH_TASK:
    case wire::Envelope::Body::PUSH_TASKS:
    case wire::Envelope::Body::INSTANTIATE_ACTOR:
    case wire::Envelope::Body::SHUTDOWN:
      s_->channel.push(std::move(in));
      channel_items_.fetch_add(1);  // seq_cst: ordered before the look at port_ below
      // An executor asleep on its call port looks at the channel when woken.
      if (auto* p = port_.load()) p->wake();
      return;
    default:
      reply_error(in, wire::ErrorCode::BAD_REQUEST, "a worker does not serve this request");
  }
}

void TaskExecutor::answer(IoLoop::Incoming& in, OutMessage& m) {
  if (in.direct) {
    port_.load()->reply(in.routing_id, m);
    return;
  }
  answer(in, m.finish());
}

bool TaskExecutor::groupable(const IoLoop::Incoming& in) const {
  return in.direct || (!s_->pools && !io_->in_loop());
}

wire::Envelope::Builder TaskExecutor::group_reply(IoLoop::Incoming& in) {
  if (in.direct) return port_.load()->group_reply(in.routing_id, in.request_id());
  if (held_.must_leave_for(in.routing_id)) flush_group(true);
  return held_.add(in.routing_id, in.request_id());
}

void TaskExecutor::grouped(IoLoop::Incoming& in) {
  if (in.direct) return port_.load()->replied(more_queued_);
  if (held_.must_leave_after(more_queued_)) flush_group(more_queued_);
}

void TaskExecutor::flush_group(bool soon) {
  if (held_.empty()) return;
  auto [to, group] = held_.take();
  Frames frames;
  frames.push_back(std::move(group));
  // With more calls queued, the group may still leave with other replies (IoLoop::reply_soon).
  if (soon)
    io_->reply_soon(std::move(to), std::move(frames));
  else
    io_->reply(std::move(to), std::move(frames));
}

void TaskExecutor::answer(IoLoop::Incoming& in, Frames frames) {
  bool executor = !io_->in_loop();
  if (executor) flush_group(more_queued_);  // the replies held go first
  // With more calls queued behind this one, its reply may join theirs (IoLoop::reply_soon).
  if (more_queued_ && executor)
    io_->reply_soon(std::move(in.routing_id), std::move(frames));
  else
    io_->reply(std::move(in.routing_id), std::move(frames));
}

void TaskExecutor::reply_ok(IoLoop::Incoming& in) {
  OutMessage m(token_, in.request_id(), true);
  m.env().getBody().setOk();
  answer(in, m);
}

void TaskExecutor::reply_error(IoLoop::Incoming& in, wire::ErrorCode code, const std::string& msg,
                               const std::string& type, const std::string& location) {
  if (groupable(in) && msg.size() + type.size() + location.size() <= grouped_bytes()) {
    set_error(group_reply(in), code, msg, type, location);
    grouped(in);
    return;
  }
  OutMessage m(token_, in.request_id(), true);
  set_error(m.env(), code, msg, type, location);
  answer(in, m);
}

void TaskExecutor::run(std::function<void()> housekeeping) {
  MemoryStore::mark_fiber_thread();  // a concurrent actor's calls may run on fibers of this thread
  io_.open(std::make_unique<IoLoop>(bind_host_, 0, token_, [this](IoLoop::Incoming in) { handle(std::move(in)); }));
  io_->post([this, housekeeping] { io_->every(std::chrono::milliseconds(50), housekeeping); });
  uint64_t rid = io_->next_request_id();
  OutMessage reg(token_, rid, false);
  auto rw = reg.env().getBody().initRegisterWorker();
  rw.setWorkerId(worker_id_);
  rw.setAddress(io_->address());
  rw.setPid(getpid());
  try {
    auto r = io_->call(node_address_, reg, rid, kRegisterTimeout);
    if (r->env().getBody().isError()) {
      spdlog::error("node manager refused worker {}: {}", worker_id_, describe(r->env().getBody().getError()));
      _exit(3);
    }
  } catch (const std::exception& e) {
    spdlog::error("worker {} cannot register with {}: {}", worker_id_, node_address_, e.what());
    _exit(3);
  }
  // One call of look-ahead: whether another is queued behind the one that runs.
  IoLoop::Incoming item, next;
  bool have_next = false;
  for (;;) {
    if (have_next)
      item = std::move(next);
    else if (!next_request(item, true))
      break;
    have_next = next_request(next, false);
    // Replies held for a requester leave before the executor turns to another source of calls.
    if (auto* port = port_.load(); port && !item.direct) port->flush();
    if (item.direct) flush_group();
    // Written only while no call runs beside this thread (a concurrent actor's stays false).
    if (!s_->pools) more_queued_ = have_next;
    auto which = item.msg->env().getBody().which();
    if (which == wire::Envelope::Body::SHUTDOWN) {
      more_queued_ = false;
      reply_ok(item);
      break;
    }
    if (which == wire::Envelope::Body::INSTANTIATE_ACTOR) {
      instantiate(item);
      continue;
    }
    if (s_->pools) {
      concurrent(std::move(item));
    } else if (item.direct) {
      auto* port = port_.load();
      port->call_begins();  // meanwhile the port answers probes (a long call is not a frozen worker)
      execute(item);
      port->call_ends();
    } else {
      execute(item);
    }
    item = {};
  }
  flush_group();
  io_->stop();  // flushes nothing more; replies already handed to the loop were sent
  _exit(0);
}

bool TaskExecutor::next_request(IoLoop::Incoming& out, bool wait) {
  auto popped = [&](boost::fibers::channel_op_status s) {
    if (s != boost::fibers::channel_op_status::success) return false;
    channel_items_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  };
  auto* port = port_.load();
  if (!port) return popped(wait ? s_->channel.pop(out) : s_->channel.try_pop(out));
  // The channel first: it carries what the I/O thread took (a shutdown, a stray call).
  for (;;) {
    if (channel_items_.load() > 0 && popped(s_->channel.try_pop(out))) return true;
    if (port->next(out, wait)) return true;
    if (!wait) return false;
  }
}

// A concurrent actor's call goes to its group's pool (call_pools.h); one naming a group the actor
// does not have is refused.
void TaskExecutor::concurrent(IoLoop::Incoming call) {
  auto pt = call.push_task();
  std::string group = pt.getConcurrencyGroup(), method = pt.getFunction();
  if (!pt.hasActorId()) {
    reply_error(call, wire::ErrorCode::BAD_REQUEST, "a worker hosting an actor runs only its calls");
    return;
  }
  if (s_->pools->submit(call, group, method)) return;
  reply_error(call, wire::ErrorCode::NOT_FOUND,
              "actor class " + s_->cls->name + " has no concurrency group '" + group + "' (its call of " + method + ")");
}

std::string TaskExecutor::open_call_port() {
  if (s_->pools) return {};  // its calls run in pools, fed by the channel
  try {
    port_owner_ = std::make_unique<CallPort>(io_.loop(), bind_host_);
  } catch (const std::exception& e) {
    spdlog::warn("worker {}: no call port ({}): the actor's calls come through its I/O thread", worker_id_, e.what());
    return {};
  }
  port_.store(port_owner_.get());
  return port_owner_->address();
}

void TaskExecutor::instantiate(IoLoop::Incoming& in) {
  auto ca = in.msg->env().getBody().getInstantiateActor();
  std::string cls_name = ca.getClassName();
  const auto* cls = Registry::global().actor_class(cls_name);
  if (!cls) {
    reply_error(in, wire::ErrorCode::NOT_FOUND, "actor class " + cls_name + " is not registered in " + self_exe());
    return;
  }
  set_log_actor(ca.getActorId(), cls_name, ca.getName());  // the constructor's lines are the actor's too
  try {
    std::vector<Bytes> args;
    for (auto v : ca.getArgs()) args.push_back(in.msg->value(v));
    s_->actor = cls->factory(args);
    s_->cls = cls;
    make_pools(ca);
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::TASK_ERROR,
                "the constructor of " + cls_name + " threw " + demangle(typeid(e).name()) + ": " + e.what(),
                demangle(typeid(e).name()), cls_name + "::" + cls_name + s_->location_suffix);
    return;
  }
  // The actor's address is its call port's when it has one.
  std::string port = open_call_port();
  if (port.empty()) {
    reply_ok(in);
    return;
  }
  OutMessage m(token_, in.request_id(), true);
  m.env().getBody().initActorInfo().setAddress(port);
  answer(in, m);
}

// An actor with max_concurrency above 1 or concurrency groups runs its calls in pools.
void TaskExecutor::make_pools(wire::CreateActor::Reader ca) {
  int max_concurrency = std::max<int>(1, static_cast<int>(ca.getMaxConcurrency()));
  std::vector<ConcurrencyGroup> groups;
  for (auto g : ca.getConcurrencyGroups()) {
    ConcurrencyGroup cg{g.getName(), std::max<int>(1, static_cast<int>(g.getMaxConcurrency())), {}};
    for (auto m : g.getMethods()) cg.methods.emplace_back(m);
    groups.push_back(std::move(cg));
  }
  if (max_concurrency == 1 && groups.empty()) return;
  auto how = ca.getConcurrency() == wire::Concurrency::FIBERS ? Concurrency::kFibers : Concurrency::kThreads;
  more_queued_ = false;  // from now on calls run beside this thread: it stays false
  s_->threads = how == Concurrency::kThreads;
  s_->pools = std::make_unique<CallPools>(how, max_concurrency, groups, [this](IoLoop::Incoming& c) { execute(c); });
}

namespace {
// A task's run in the process's metrics: running while it runs, then finished or failed, and
// its duration. Labelled by function, or Class.method for an actor call.
struct TaskRecord {
  const std::string& label;
  std::string named;  // the name its caller gave it: its span's name instead of the label
  const char* kind;
  metrics::detail::Registry& r = metrics::detail::Registry::instance();
  metrics::detail::Registry::TaskSeries* series = nullptr;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  bool ok = false;
  // `s` is null when metrics are off: nothing is recorded.
  TaskRecord(const std::string& l, metrics::detail::Registry::TaskSeries* s, bool actor)
      : label(l), kind(actor ? "actor_call" : "task"), series(s) {
    if (series) r.task_started(series);
  }
  ~TaskRecord() {
    if (!series) return;
    auto end = std::chrono::steady_clock::now();
    auto dur = end - t0;
    r.task_ended(series, ok, std::chrono::duration<double>(dur).count());
    TaskEvents::instance().span(named.empty() ? label : named, kind, t0, end, ok);
  }
};
}  // namespace

// What every call of one function or method is labelled with: made at its first call.
const TaskExecutor::Label& TaskExecutor::label_of(const std::string& fn, bool is_actor) {
  auto& cache = is_actor && s_->cls ? method_labels_ : function_labels_;
  auto it = cache.find(fn);
  if (it != cache.end()) return it->second;
  Label l;
  l.label = is_actor && s_->cls ? s_->cls->name + "." + fn : fn;
  auto& r = metrics::detail::Registry::instance();
  if (r.enabled()) l.series = r.task_series(l.label);
  return cache.emplace(fn, std::move(l)).first->second;
}

const TaskExecutor::Callee& TaskExecutor::callee_of(kj::StringPtr fn, bool is_actor) {
  auto& c = last_callee_;
  const ActorClass* cls = is_actor ? s_->cls : nullptr;
  // A name not found is looked up again each time (it may be registered later).
  if (c.label && (c.method || c.function) && c.is_actor == is_actor && c.cls == cls &&
      std::string_view(c.fn) == std::string_view(fn.begin(), fn.size()))
    return c;
  c.fn.assign(fn.begin(), fn.size());
  c.is_actor = is_actor;
  c.cls = cls;
  c.label = &label_of(c.fn, is_actor);
  c.method = nullptr;
  c.function = is_actor ? nullptr : Registry::global().function(c.fn);
  if (is_actor && s_->cls)
    if (auto it = s_->cls->methods.find(c.fn); it != s_->cls->methods.end()) c.method = &it->second;
  return c;
}

// Copied out under the lock on pool threads: another call may find another callee meanwhile.
TaskExecutor::Target TaskExecutor::target_of(kj::StringPtr fn, bool is_actor) {
  std::unique_lock<std::mutex> lock(s_->callee_mu, std::defer_lock);
  if (s_->threads) lock.lock();
  const Callee& c = callee_of(fn, is_actor);
  return {c.label, c.method, c.function};
}

void TaskExecutor::execute(IoLoop::Incoming& in) {
  auto pt = in.push_task();
  kj::StringPtr fn = pt.getFunction();
  bool is_actor = pt.hasActorId();  // set only by actor calls (task_submitter.cc sends none)
  kj::StringPtr given = pt.getName();
  // Where a failure happened, for its error (made only then): "name (Class::method) on worker ...".
  auto where = [&] {
    std::string what = (is_actor && s_->cls ? s_->cls->name + "::" : std::string()) + fn.cStr();
    if (given.size()) what = std::string(given.cStr()) + " (" + what + ")";
    return what + s_->location_suffix;
  };
  auto [label_of_call, method, function] = target_of(fn, is_actor);
  const Label& label = *label_of_call;
  TaskRecord record(label.label, label.series, is_actor);
  if (given.size() && label.series) record.named = given.cStr();
  if (auto d = testing_delay(record.label); d.count() > 0) boost::this_fiber::sleep_for(d);
  std::optional<TaskLogScope> log_scope;  // a task's lines are tagged with it (an actor's, with the actor)
  if (!is_actor) log_scope.emplace(std::string_view(pt.getTaskId().cStr(), pt.getTaskId().size()), fn.cStr());
  Bytes result;
  try {
    std::vector<Bytes> args;
    auto in_args = pt.getArgs();
    args.reserve(in_args.size());
    for (auto v : in_args) args.push_back(in.msg->value(v));
    if (is_actor) {
      if (!s_->actor) {
        reply_error(in, wire::ErrorCode::ACTOR_DIED, "this worker hosts no actor", {}, where());
        return;
      }
      if (!method) {
        reply_error(in, wire::ErrorCode::NOT_FOUND, "actor class " + s_->cls->name + " has no method " + fn.cStr(), {},
                    where());
        return;
      }
      result = (*method)(s_->actor.get(), args);
    } else {
      if (!function) {
        reply_error(in, wire::ErrorCode::NOT_FOUND,
                    std::string("function ") + fn.cStr() + " is not registered in " + self_exe(), {}, where());
        return;
      }
      result = (*function)(args);
    }
  } catch (const RemoteError& e) {
    // A nested remote failure keeps its original type and place.
    reply_error(in, wire::ErrorCode::TASK_ERROR, e.remote_message(), e.remote_type(), e.location() + " <- " + where());
    return;
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::TASK_ERROR, e.what(), demangle(typeid(e).name()), where());
    return;
  } catch (...) {
    reply_error(in, wire::ErrorCode::TASK_ERROR, "a non-standard exception was thrown", "unknown", where());
    return;
  }
  record.ok = true;
  if (groupable(in) && result->size() <= grouped_bytes()) {  // most results: in a group of replies
    auto v = group_reply(in).getBody().initTaskReply().initResult();
    v.setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(result->data()), result->size()));
    grouped(in);
    return;
  }
  OutMessage m(token_, in.request_id(), true);
  auto value = m.env().getBody().initTaskReply().initResult();
  // Where the caller runs matters only to a result too large to travel inline.
  bool small = result->size() < std::min<uint64_t>(kShmMinBytes, kHoldResultBytes);
  if (!small && in.msg->same_host()) {
    m.allow_shared_memory();
    m.set_value(value, result);
  } else if (!small && result->size() >= kHoldResultBytes) {
    // For another host, a large result is kept here and fetched in parts (object_fetch.h): the
    // parts' encryption and decryption overlap, and the caller's other calls to this worker do
    // not wait behind one large frame.
    ownership_.hold(std::string(pt.getTaskId()) + "/result", result, value);
  } else {
    m.set_value(value, result);
  }
  answer(in, m);
}

}  // namespace yard::detail
