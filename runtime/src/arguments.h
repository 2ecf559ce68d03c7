// Arguments of tasks, actor calls and actor creations: ObjectRef arguments are waited for
// (fetched from their owners when borrowed) without blocking anyone, then every argument's value
// is written into the request. The one place that does this for all three kinds of request.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io_loop.h"
#include "memory_store.h"
#include "ownership.h"
#include "wire.h"

namespace yard::detail {

struct TaskSpec;

// Why an argument could not be written: it holds an error (passed on to the dependent call), or
// it is gone from this process.
struct ArgumentProblem {
  size_t index = 0;
  std::string object;               // the ObjectRef's id
  std::optional<ErrorInfo> error;   // set: the argument's own error
};

class ArgumentResolver {
 public:
  ArgumentResolver(MemoryStore& store, const std::unique_ptr<IoLoop>& io, Ownership& ownership)
      : store_(store), io_(io), ownership_(ownership) {}
  // Where the submitters complete results (a large one from another host is fetched first).
  Ownership& ownership() { return ownership_; }

  // Runs on_loop on the I/O thread once every ObjectRef argument of the spec is ready (at once
  // when there are none); spec->resolved is true by then.
  void resolve_then(const std::shared_ptr<TaskSpec>& spec, std::function<void()> on_loop);
  // True, with spec.resolved set, when the spec has no ObjectRef arguments (nothing to wait for).
  static bool ready_now(TaskSpec& spec);
  // Writes the resolved values into `list` (one element per argument). nullopt when all were
  // written.
  std::optional<ArgumentProblem> fill(capnp::List<wire::Value>::Builder list, OutMessage& m, const std::vector<Arg>& args);
  // The spec's arguments into a task or actor-call request. False when one is an error (which
  // the spec's result then holds too) or gone (the result fails with NOT_FOUND).
  bool fill_task(wire::PushTask::Builder b, OutMessage& m, TaskSpec& spec);

 private:
  MemoryStore& store_;
  const std::unique_ptr<IoLoop>& io_;
  Ownership& ownership_;
};

}  // namespace yard::detail
