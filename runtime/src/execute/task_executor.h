// The worker side of a Switchyard process: it registers with its node manager, then runs the
// tasks, actor constructions and actor calls pushed to it, one at a time on the main thread, or,
// for a concurrent actor, in the pools of its concurrency groups (call_pools.h: threads, or fibers
// of the main thread). How calls run is a runner chosen once (call_runners.h); where a reply goes
// is the sink of the path its call came by (reply_sink.h). The I/O thread feeds it through a fiber
// channel, so a call on a fiber blocked in get() suspends only its own fiber; the process's
// submitter (nested tasks) shares the same I/O loop.
#pragma once

#include <atomic>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "call_port.h"
#include "execute/call_runners.h"
#include "execute/loop_replies.h"
#include "messenger.h"
#include "metrics/metrics_registry.h"
#include "objects/ownership.h"

namespace yard::detail {

struct WorkerConfig;

class TaskExecutor {
 public:
  // The process's channel: run() opens it (its request handler is this executor).
  TaskExecutor(Channel& io, Ownership& ownership, std::string token, const WorkerConfig& cfg);
  ~TaskExecutor();
  // Binds, registers with the node manager and serves until told to shut down; then exits the
  // process. Exits with status 3 when the node manager cannot be reached or refuses it.
  // `housekeeping` runs on the I/O thread every 50 ms.
  [[noreturn]] void run(std::function<void()> housekeeping);
  // The process is being stopped: requests are no longer answered (its objects, calls), as if it
  // had exited, while it sends its last report.
  void stop_serving() {
    stopping_.store(true);
    if (auto* p = port_.load()) p->stop_serving();
  }

 private:
  void handle(IoLoop::Incoming in);  // I/O thread
  // Sends RegisterWorker to the node manager; exits the process (status 3) when refused.
  void register_worker();
  // Executor thread: the next request to run, from the I/O thread or the call port; with `wait`,
  // waits for one (false when the channel is closed).
  bool next_request(IoLoop::Incoming& out, bool wait);
  // Executor thread: a non-concurrent actor's calls come to a port of their own (call_port.h).
  // Its address, or empty when it has none.
  std::string open_call_port();
  void instantiate(IoLoop::Incoming& in);
  // The runner of an actor's calls (call_runners.h), chosen once it is made: in pools when it has
  // max_concurrency above 1 or concurrency groups, else on its call port, else as tasks run.
  void choose_runner(wire::CreateActor::Reader ca);
  void execute(IoLoop::Incoming& in);
  // Each call is answered through the sink of the path it came by (its reply_to); `more_queued_`
  // lets a reply wait for the one to the call queued behind it.
  void answer(IoLoop::Incoming& in, OutMessage& m) { in.reply_to->reply(in, m, more_queued_); }
  void reply_ok(IoLoop::Incoming& in);
  void reply_error(IoLoop::Incoming& in, wire::ErrorCode code, const std::string& msg, const std::string& type = {},
                   const std::string& location = {});

  struct Label {
    std::string label;  // function, or Class.method
    metrics::detail::Registry::TaskSeries* series = nullptr;  // null when metrics are off
  };
  // The executor thread, or a call on a pool thread holding State::callee_mu.
  const Label& label_of(const std::string& fn, bool is_actor);
  // What a call names, found once for a run of calls to the same function or method.
  struct Callee {
    std::string fn;
    bool is_actor = false;
    const ActorClass* cls = nullptr;  // the hosted class it was found in (null for a task)
    const Label* label = nullptr;
    const MethodInvoker* method = nullptr;  // an actor's method; null when it has none of that name
    const Invoker* function = nullptr;      // a task's function; null when none is registered
  };
  const Callee& callee_of(kj::StringPtr fn, bool is_actor);  // as label_of
  // What a call runs, found through callee_of (under State::callee_mu on pool threads): any thread.
  struct Target {
    const Label* label;
    const MethodInvoker* method;
    const Invoker* function;
  };
  Target target_of(kj::StringPtr fn, bool is_actor);

  Channel& io_;
  Ownership& ownership_;
  const std::string token_;
  const std::string worker_id_, node_address_, bind_host_;
  struct State;  // the channel, the hosted actor and the fibers' bookkeeping
  std::unique_ptr<State> s_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<CallPort> port_owner_;   // executor thread
  std::atomic<CallPort*> port_{nullptr};  // read by the I/O thread
  std::atomic<int> channel_items_{0};     // what the I/O thread put in the channel, not yet taken
  // Executor thread: another call is queued behind the running one (false while calls run beside
  // this thread, in pools).
  bool more_queued_ = false;
  GroupedReplies grouped_{io_, token_};  // the executor thread's replies to what the loop handed it
  LoopReplies loop_replies_{io_};        // replies from the I/O thread and the pools
  std::unique_ptr<CallRunner> runner_;   // how calls run (call_runners.h)
  std::unordered_map<std::string, Label> function_labels_, method_labels_;  // executor thread only
  Callee last_callee_;  // executor thread only
};

}  // namespace yard::detail
