// Arguments of tasks, actor calls and actor creations: ObjectRef arguments are waited for
// (fetched from their owners when borrowed) without blocking anyone, then every argument's value
// is written into the request. The one place that does this for all three kinds of request.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "messenger.h"
#include "objects/memory_store.h"
#include "objects/ownership.h"
#include "submit/task_spec.h"
#include "wire.h"

namespace yard::detail {

// Why an argument could not be written: it holds an error (passed on to the dependent call), or
// it is gone from this process.
struct ArgumentProblem {
  size_t index = 0;
  std::string object;               // the ObjectRef's id
  std::optional<ErrorInfo> error;   // set: the argument's own error
};

class ArgumentResolver {
 public:
  ArgumentResolver(MemoryStore& store, Messenger& io, Ownership& ownership)
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
  Messenger& io_;
  Ownership& ownership_;
};

// Calls whose arguments are all values, to one worker, travel together as one request
// (pushTasks): its envelope is built, sent and read once for all of them, while each call stays a
// request of its own (its id, its reply, its failure). Loop thread only.
class CallGroup {
 public:
  // A group holds at most this many calls, in a message that fits a large scratch segment.
  static constexpr size_t kMaxCalls = 256;
  static constexpr size_t kMaxWords = ScratchSegment::kLargeWords - 128;

  // The words a call takes in a group (its record, ids and values; `actor_id`: its actor's id,
  // or empty for a task); nullopt when it travels alone (an ObjectRef argument, or over an eighth
  // of a group).
  static std::optional<size_t> words(const TaskSpec& spec, const std::string& actor_id) {
    size_t w = 8 + (spec.id.size() + spec.function.size() + actor_id.size()) / 8 + 3;
    if (!spec.concurrency_group.empty()) w += spec.concurrency_group.size() / 8 + 2;
    if (!spec.name.empty()) w += spec.name.size() / 8 + 2;
    for (auto& a : spec.args) {
      if (a.ref || !a.value) return std::nullopt;
      w += 3 + a.value->size() / 8 + 1;
    }
    if (w > kMaxWords / 8) return std::nullopt;
    return w;
  }
  bool fits(size_t words) const { return specs_.size() < kMaxCalls && words_ + words <= kMaxWords; }
  void add(std::shared_ptr<TaskSpec> spec, size_t words) {
    specs_.push_back(std::move(spec));
    words_ += words;
  }
  // Sends the calls to `to` (a lone call as a request of its own), each answered through the
  // callback reply_for(spec) makes for it, and empties the group. `shared_memory`: `to` is on
  // this host.
  template <class ReplyFor>
  void send(Messenger& io, ArgumentResolver& args, const std::string& token, std::string to, const std::string& actor_id,
            bool shared_memory, const ReplyFor& reply_for);
  // One call as a request of its own (any arguments: an ObjectRef's value is looked up now);
  // false, with nothing sent, when an argument is an error or gone (the call's result says so).
  template <class ReplyFor>
  static bool send_one(Messenger& io, ArgumentResolver& args, const std::string& token, std::string to,
                       const std::string& actor_id, bool shared_memory, std::shared_ptr<TaskSpec> spec,
                       const ReplyFor& reply_for);

 private:
  // False when an argument could not be written (fill_task).
  static bool write_call(wire::PushTask::Builder pt, OutMessage& m, TaskSpec& spec, ArgumentResolver& args,
                         const std::string& to, const std::string& actor_id);
  std::vector<std::shared_ptr<TaskSpec>> specs_;
  size_t words_ = 0;
};

template <class ReplyFor>
void CallGroup::send(Messenger& io, ArgumentResolver& args, const std::string& token, std::string to,
                     const std::string& actor_id, bool shared_memory, const ReplyFor& reply_for) {
  if (specs_.size() == 1) {
    send_one(io, args, token, std::move(to), actor_id, shared_memory, std::move(specs_[0]), reply_for);
  } else if (!specs_.empty()) {
    std::vector<std::pair<uint64_t, ReplyCallback>> calls;
    calls.reserve(specs_.size());
    for (size_t i = 0; i < specs_.size(); ++i) calls.emplace_back(io.next_request_id(), nullptr);
    OutMessage m(token, calls[0].first, false, 64 + words_);  // with the envelope: one segment
    if (shared_memory) m.allow_shared_memory();
    auto list = m.env().getBody().initPushTasks(static_cast<unsigned>(specs_.size()));
    for (size_t i = 0; i < specs_.size(); ++i) {
      auto pt = list[static_cast<unsigned>(i)];
      pt.setRequestId(calls[i].first);
      (void)write_call(pt, m, *specs_[i], args, to, actor_id);  // values only: nothing fails
      calls[i].second = reply_for(std::move(specs_[i]));
    }
    io.request_group(to, m, std::move(calls), std::chrono::milliseconds::max());
  }
  specs_.clear();
  words_ = 0;
}

template <class ReplyFor>
bool CallGroup::send_one(Messenger& io, ArgumentResolver& args, const std::string& token, std::string to,
                         const std::string& actor_id, bool shared_memory, std::shared_ptr<TaskSpec> spec,
                         const ReplyFor& reply_for) {
  uint64_t rid = io.next_request_id();
  OutMessage m(token, rid, false);
  if (shared_memory) m.allow_shared_memory();
  if (!write_call(m.env().getBody().initPushTask(), m, *spec, args, to, actor_id)) return false;
  io.request(to, rid, m, reply_for(std::move(spec)), std::chrono::milliseconds::max());
  return true;
}

}  // namespace yard::detail
