// How a worker's executor thread runs the calls it takes (task_executor.h): a strategy chosen
// when the worker starts (it runs tasks) and again when it learns that it hosts an actor, never
// asked again per call. Calls run on the executor's thread one at a time (InlineCalls); on the
// thread that owns a non-concurrent actor's call port, which meanwhile answers liveness probes
// (PortCalls); or handed to a concurrent actor's pools of threads or fibers (PooledCalls). Another
// way to run calls (a thread pool for tasks, a program's own thread in a local mode) is another
// implementation of CallRunner.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "execute/call_pools.h"
#include "transport/call_port.h"
#include "transport/reply_sink.h"

namespace yard::detail {

class CallRunner {
 public:
  using Execute = std::function<void(IoLoop::Incoming&)>;  // runs one call and answers it
  virtual ~CallRunner() = default;
  // Whether calls run one at a time on the executor's thread; then a reply may wait for the one
  // to the call queued behind it.
  virtual bool serial() const = 0;
  // Executor thread: runs the call, or hands it to where it runs; it is answered either way.
  virtual void run(IoLoop::Incoming& call) = 0;
};

class InlineCalls final : public CallRunner {
 public:
  explicit InlineCalls(Execute execute) : execute_(std::move(execute)) {}
  bool serial() const override { return true; }
  void run(IoLoop::Incoming& call) override { execute_(call); }

 private:
  Execute execute_;
};

class PortCalls final : public CallRunner {
 public:
  PortCalls(CallPort& port, Execute execute) : port_(port), execute_(std::move(execute)) {}
  bool serial() const override { return true; }
  void run(IoLoop::Incoming& call) override {
    port_.call_begins();  // meanwhile the port answers probes (a long call is not a frozen worker)
    execute_(call);
    port_.call_ends();
  }

 private:
  CallPort& port_;
  Execute execute_;
};

class PooledCalls final : public CallRunner {
 public:
  // Answers a call it cannot run (through the call's own sink): its code and why.
  using Refuse = std::function<void(IoLoop::Incoming&, wire::ErrorCode, const std::string&)>;
  // `replies`: where the pools' calls are answered from their threads or fibers.
  PooledCalls(std::unique_ptr<CallPools> pools, ReplySink& replies, std::string class_name, Refuse refuse)
      : pools_(std::move(pools)), replies_(replies), class_name_(std::move(class_name)), refuse_(std::move(refuse)) {}
  bool serial() const override { return false; }
  // The call goes to its group's pool (call_pools.h); one naming a group the actor does not have,
  // or one that is not an actor call, is refused.
  void run(IoLoop::Incoming& call) override;

 private:
  std::unique_ptr<CallPools> pools_;
  ReplySink& replies_;
  const std::string class_name_;
  Refuse refuse_;
};

}  // namespace yard::detail
