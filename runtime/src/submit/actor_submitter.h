// The actor submitter: creates actors through the head, then sends their calls straight to the
// actor's worker, in submission order. A call whose connection broke asks the head where the
// actor is: restarted (the call fails with ActorRestarting, later calls go to the new process)
// or dead (ActorDied). A call whose connection was refused never left this process and is sent
// again to wherever the actor is now. Requests to a head that is restarting are retried for a
// minute.
//
// Thread-safety: create, lookup, from_id, call and kill may be called from any thread; the rest
// runs on the I/O thread.
#pragma once

#include "head_address.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "submit/arguments.h"
#include "messenger.h"
#include "objects/memory_store.h"
#include "submit/task_spec.h"

namespace yard::detail {

class ActorSubmitter {
 public:
  using MakeSpec = std::function<std::shared_ptr<TaskSpec>(std::string, std::vector<Arg>)>;
  // The strings are the process's own (token, the head's address, its job, namespace and node),
  // read when used: a driver learns its job, namespace and node after this is made.
  // `node`: the node manager asked where the head is when it does not answer.
  ActorSubmitter(MemoryStore& store, Messenger& io, ArgumentResolver& args, MakeSpec make_spec,
                 const std::string& token, HeadAddress& head, const std::string& node, const std::string& job_id,
                 const std::string& name_space, const std::string& node_id)
      : store_(store), io_(io), args_(args), make_spec_(std::move(make_spec)), token_(token), head_(head),
        node_(node), job_id_(job_id), name_space_(name_space), node_id_(node_id) {}

  ActorPtr create(const std::string& cls, std::vector<Arg> args, const ActorOptions& o);
  // A named actor in a namespace ("": this process's), asked of the head now. Throws
  // NotFoundError or ActorDied.
  ActorPtr lookup(const std::string& name, const std::string& cls, const std::string& name_space);
  // An actor known by id (received in a value): found on first use.
  ActorPtr from_id(const std::string& id, const std::string& cls);
  Holder call(const ActorPtr& a, const std::string& method, std::vector<Arg> args, const CallOptions& call = {});
  // Ends the actor's process. Throws TimeoutError when the head does not answer.
  // Kills the actor (restart: its process only; the head restarts it within its budget).
  void kill(const ActorPtr& a, bool restart = false);

 private:
  void send_creation(const std::shared_ptr<TaskSpec>& spec);
  void on_created(const std::shared_ptr<TaskSpec>& spec, const InMessage& r);
  void infeasible(const ActorPtr& a, const std::string& why);
  // Loop thread: the calls made since the last time, queued on their actors and sent.
  void take_submitted();
  void flush(const ActorPtr& a);
  void send_call(const ActorPtr& a, std::shared_ptr<TaskSpec> spec);
  ReplyCallback on_reply(std::shared_ptr<TaskSpec> spec);
  void dead(const ActorPtr& a, const std::string& cause);
  void restarted(const ActorPtr& a);  // killed to restart (kill with restart)
  void connection_lost(const ActorPtr& a, const std::shared_ptr<TaskSpec>& spec, const std::string& address,
                       const std::string& why, bool delivered);
  void lookup_address(const ActorPtr& a);
  bool retry_through_head_outage(const ActorPtr& a, const InMessage* r, const std::optional<LocalError>& err,
                                 std::function<void()> again);

  MemoryStore& store_;
  Messenger& io_;
  ArgumentResolver& args_;
  MakeSpec make_spec_;
  const std::string& token_;
  HeadAddress& head_;
  const std::string& node_;
  const std::string& job_id_;
  const std::string& name_space_;
  const std::string& node_id_;

  struct Submitted {
    std::shared_ptr<TaskSpec> spec;  // its actor is spec->actor
    bool ready;                      // no ObjectRef arguments to wait for
  };
  std::mutex submit_mu_;
  std::vector<Submitted> submitted_;  // guarded by submit_mu_: made, not yet taken by the loop
};

}  // namespace yard::detail
