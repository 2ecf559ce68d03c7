#include "execute/call_runners.h"

namespace yard::detail {

void PooledCalls::run(IoLoop::Incoming& call) {
  auto pt = call.push_task();
  if (!pt.hasActorId()) {
    refuse_(call, wire::ErrorCode::BAD_REQUEST, "a worker hosting an actor runs only its calls");
    return;
  }
  std::string group = pt.getConcurrencyGroup(), method = pt.getFunction();
  ReplySink* came_by = call.reply_to;
  call.reply_to = &replies_;
  if (pools_->submit(call, group, method)) return;
  call.reply_to = came_by;
  refuse_(call, wire::ErrorCode::NOT_FOUND,
          "actor class " + class_name_ + " has no concurrency group '" + group + "' (its call of " + method + ")");
}

}  // namespace yard::detail
