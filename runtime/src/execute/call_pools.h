// A concurrent actor's calls (max_concurrency above 1, or concurrency groups): each group of them,
// the default one of max_concurrency and those the actor declared, runs at most its limit at once
// on a pool of its own, of threads (Ray's meaning of max_concurrency: a call blocked in anything
// stalls only itself) or of fibers on the executor's thread (a call blocked in Switchyard's waits
// suspends only itself). The executor hands each call over and goes on taking calls; a call waits
// in its group's queue while its group is full. Workers of a pool start as calls need them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/io_loop.h"
#include "yard/yard.h"

namespace yard::detail {

class CallPools {
 public:
  using Run = std::function<void(IoLoop::Incoming&)>;  // runs one call and answers it
  // One pool of calls; its implementations run them on threads or on fibers.
  class Pool {
   public:
    virtual ~Pool() = default;
    virtual void push(IoLoop::Incoming call) = 0;
  };

  CallPools(Concurrency how, int max_concurrency, const std::vector<ConcurrencyGroup>& groups, Run run);
  ~CallPools();
  // Executor thread: queues the call (moved from `call`) in the group it names, else its method's,
  // else the default one. False, with `call` left as it was, when it names a group the actor did
  // not declare.
  bool submit(IoLoop::Incoming& call, const std::string& group, const std::string& method);

 private:
  Run run_;
  std::map<std::string, std::unique_ptr<Pool>> pools_;  // "": the default group
  std::map<std::string, std::string> method_group_;
};

}  // namespace yard::detail
