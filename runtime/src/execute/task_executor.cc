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
  bool threads = false;  // a concurrent actor's calls run on threads (they find their callee under callee_mu)
  std::mutex callee_mu;
  std::string location_suffix;  // " on worker W (pid P, host H)", in every error's location
};

TaskExecutor::TaskExecutor(Channel& io, Ownership& ownership, std::string token,
                           const WorkerConfig& cfg)
    : io_(io), ownership_(ownership), token_(std::move(token)), worker_id_(cfg.worker_id),
      node_address_(cfg.node_address), bind_host_(cfg.bind_host.empty() ? "127.0.0.1" : cfg.bind_host),
      s_(std::make_unique<State>()) {
  s_->location_suffix = " on worker " + worker_id_ + " (pid " + std::to_string(getpid()) + ", host " + hostname() + ")";
  runner_ = std::make_unique<InlineCalls>([this](IoLoop::Incoming& c) { execute(c); });
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
      in.reply_to = &grouped_;  // answered by the executor's thread
      s_->channel.push(std::move(in));
      channel_items_.fetch_add(1);  // seq_cst: ordered before the look at port_ below
      // An executor asleep on its call port looks at the channel when woken.
      if (auto* p = port_.load()) p->wake();
      return;
    default:
      in.reply_to = &loop_replies_;
      reply_error(in, wire::ErrorCode::BAD_REQUEST, "a worker does not serve this request");
  }
}

void TaskExecutor::reply_ok(IoLoop::Incoming& in) {
  OutMessage m(token_, in.request_id(), true);
  m.env().getBody().setOk();
  answer(in, m);
}

void TaskExecutor::reply_error(IoLoop::Incoming& in, wire::ErrorCode code, const std::string& msg,
                               const std::string& type, const std::string& location) {
  if (in.reply_to->groups() && msg.size() + type.size() + location.size() <= grouped_bytes()) {
    set_error(in.reply_to->group_reply(in), code, msg, type, location);
    in.reply_to->replied(more_queued_);
    return;
  }
  OutMessage m(token_, in.request_id(), true);
  set_error(m.env(), code, msg, type, location);
  answer(in, m);
}

void TaskExecutor::register_worker() {
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
}

void TaskExecutor::run(std::function<void()> housekeeping) {
  MemoryStore::mark_fiber_thread();  // a concurrent actor's calls may run on fibers of this thread
  io_.open(std::make_unique<IoLoop>(bind_host_, 0, token_, [this](IoLoop::Incoming in) { handle(std::move(in)); }));
  io_->post([this, housekeeping] { io_->every(std::chrono::milliseconds(50), housekeeping); });
  register_worker();
  // One call of look-ahead: whether another is queued behind the one that runs.
  IoLoop::Incoming item, next;
  bool have_next = false;
  ReplySink* last = &grouped_;  // the sink of the call before
  for (;;) {
    if (have_next)
      item = std::move(next);
    else if (!next_request(item, true))
      break;
    have_next = next_request(next, false);
    // Replies held for a requester leave before the executor turns to another source of calls.
    if (item.reply_to != last) {
      last->flush();
      last = item.reply_to;
    }
    // Written only while no call runs beside this thread (a concurrent actor's stays false).
    if (runner_->serial()) more_queued_ = have_next;
    auto which = item.msg->env().getBody().which();
    if (which == wire::Envelope::Body::SHUTDOWN) {
      more_queued_ = false;
      reply_ok(item);
      break;
    }
    if (which == wire::Envelope::Body::INSTANTIATE_ACTOR)
      instantiate(item);
    else
      runner_->run(item);
    item = {};
  }
  last->flush();
  grouped_.flush();
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

std::string TaskExecutor::open_call_port() {
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
    choose_runner(ca);
  } catch (const std::exception& e) {
    reply_error(in, wire::ErrorCode::TASK_ERROR,
                "the constructor of " + cls_name + " threw " + demangle(typeid(e).name()) + ": " + e.what(),
                demangle(typeid(e).name()), cls_name + "::" + cls_name + s_->location_suffix);
    return;
  }
  // The actor's address is its call port's when it has one.
  if (!port_.load()) {
    reply_ok(in);
    return;
  }
  OutMessage m(token_, in.request_id(), true);
  m.env().getBody().initActorInfo().setAddress(port_.load()->address());
  answer(in, m);
}

void TaskExecutor::choose_runner(wire::CreateActor::Reader ca) {
  auto execute = [this](IoLoop::Incoming& c) { this->execute(c); };
  int max_concurrency = std::max<int>(1, static_cast<int>(ca.getMaxConcurrency()));
  std::vector<ConcurrencyGroup> groups;
  for (auto g : ca.getConcurrencyGroups()) {
    ConcurrencyGroup cg{g.getName(), std::max<int>(1, static_cast<int>(g.getMaxConcurrency())), {}};
    for (auto m : g.getMethods()) cg.methods.emplace_back(m);
    groups.push_back(std::move(cg));
  }
  if (max_concurrency > 1 || !groups.empty()) {  // its calls run in pools, fed by the channel
    auto how = ca.getConcurrency() == wire::Concurrency::FIBERS ? Concurrency::kFibers : Concurrency::kThreads;
    more_queued_ = false;  // from now on calls run beside this thread: it stays false
    s_->threads = how == Concurrency::kThreads;
    auto refuse = [this](IoLoop::Incoming& c, wire::ErrorCode code, const std::string& why) { reply_error(c, code, why); };
    runner_ = std::make_unique<PooledCalls>(std::make_unique<CallPools>(how, max_concurrency, groups, execute),
                                            loop_replies_, s_->cls->name, refuse);
    return;
  }
  if (!open_call_port().empty()) runner_ = std::make_unique<PortCalls>(*port_.load(), execute);
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
  if (in.reply_to->groups() && result->size() <= grouped_bytes()) {  // most results: in a group of replies
    auto v = in.reply_to->group_reply(in).getBody().initTaskReply().initResult();
    v.setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(result->data()), result->size()));
    in.reply_to->replied(more_queued_);
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
