#include "submit/arguments.h"

#include "core_worker.h"
#include "objects/shm_store.h"

namespace yard::detail {

void ArgumentResolver::resolve_then(const std::shared_ptr<TaskSpec>& spec, std::function<void()> on_loop) {
  if (ready_now(*spec)) {
    io_.post(std::move(on_loop));
    return;
  }
  int refs = 0;
  for (auto& a : spec->args) refs += a.ref ? 1 : 0;
  spec->unresolved.store(refs + 1);
  auto shared = std::make_shared<std::function<void()>>(std::move(on_loop));
  auto done = [this, spec, shared] {
    if (spec->unresolved.fetch_sub(1) == 1) {
      io_.post([spec, shared] {
        spec->resolved = true;
        (*shared)();
      });
    }
  };
  for (auto& a : spec->args)
    if (a.ref) {
      ownership_.ensure_fetched(a.ref->id());
      store_.on_ready(a.ref->id(), done);
    }
  done();
}

bool ArgumentResolver::ready_now(TaskSpec& spec) {
  for (auto& a : spec.args)
    if (a.ref) return false;
  spec.resolved = true;
  return true;
}

std::optional<ArgumentProblem> ArgumentResolver::fill(capnp::List<wire::Value>::Builder list, OutMessage& m,
                                                      const std::vector<Arg>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    Bytes v = a.value;
    if (a.ref && !a.value) {  // (with a value: the ref itself is passed, once its object is ready)
      auto snap = store_.peek(a.ref->id());
      if (!snap.present || snap.error) return ArgumentProblem{i, a.ref->id(), snap.error};
      v = snap.value;
      // An object sent to this host once moves into shared memory for good: later calls that
      // take it copy nothing.
      if (m.shared_memory_allowed() && v->size() >= kShmMinBytes && !dynamic_cast<const ShmBuffer*>(v.get()))
        if (auto sb = ShmPool::instance().copy(v->data(), v->size())) {
          store_.replace_value(a.ref->id(), v, sb);
          v = std::move(sb);
        }
    }
    m.set_value(list[static_cast<unsigned>(i)], v);
  }
  return std::nullopt;
}

bool ArgumentResolver::fill_task(wire::PushTask::Builder b, OutMessage& m, TaskSpec& spec) {
  auto problem = fill(b.initArgs(static_cast<unsigned>(spec.args.size())), m, spec.args);
  if (!problem) return true;
  if (problem->error)
    store_.set_error(spec.id, *problem->error);  // the error propagates to the dependent call
  else
    fail_object(store_, spec.id, wire::ErrorCode::NOT_FOUND,
                "argument " + std::to_string(problem->index) + " refers to object " + problem->object +
                    ", which this process does not own");
  return false;
}

bool CallGroup::write_call(wire::PushTask::Builder pt, OutMessage& m, TaskSpec& spec, ArgumentResolver& args,
                           const std::string& to, const std::string& actor_id) {
  pt.setTaskId(kj::StringPtr(spec.id.c_str(), spec.id.size()));
  pt.setFunction(kj::StringPtr(spec.function.c_str(), spec.function.size()));
  if (!spec.name.empty()) pt.setName(spec.name);
  if (!args.fill_task(pt, m, spec)) return false;
  if (actor_id.empty()) return true;
  pt.setActorId(kj::StringPtr(actor_id.c_str(), actor_id.size()));
  if (!spec.concurrency_group.empty()) pt.setConcurrencyGroup(spec.concurrency_group);
  spec.sent_to = to;
  return true;
}

}  // namespace yard::detail
