// Actors the head placed on this node. Each gets a dedicated worker process (started once its job's
// binary is here); when the worker registers, it is asked to construct the actor, and the head's
// request is answered with where the actor lives, or why it could not be made. A hosted actor's
// process that dies later is reported to the head, which decides whether it restarts. Owns the
// hosted actors; reaches the rest of the node through ActorHosting::Node.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/service.h"
#include "node/job_runner.h"
#include "node/local_resources.h"
#include "node/worker_pool.h"

namespace yard::sched {

class ActorHosting {
 public:
  class Node {
   public:
    virtual ~Node() = default;
    virtual void with_job(const std::string& job_id, std::function<void(Result<JobRunner::Job*>)> k) = 0;
    // Starts the actor's worker; its id. Throws when the process cannot be started.
    // `runtime_env`: the actor's own (yard/runtime_env.h's JSON, "" : none). Throws yard::Error
    // saying why it cannot start (its working directory is not on this node, for one).
    virtual std::string spawn_actor_worker(const std::string& job_id, const std::string& actor_id, uint32_t restarts,
                                           const WorkerPool::Devices& devices, const std::string& runtime_env) = 0;
    // The head hears that a constructed actor's process is gone.
    virtual void actor_lost(const std::string& actor_id, const std::string& cause) = 0;
  };

  ActorHosting(detail::Messenger& io, const std::string& token, const std::string& node_id,
               WorkerPool& workers, LocalResources& res, Node& node)
      : io_(io), token_(token), node_id_(node_id), reply_(io, token), workers_(workers), res_(res), node_(node) {}

  // The head's HostActor request: answered once the actor is constructed (or cannot be).
  void host(Incoming& in);
  // The actor's worker registered: it is asked to construct the actor (a worker for an actor no
  // longer hosted is killed).
  void registered(WorkerPool::Worker& w);
  // The head's KillHosted request.
  void kill(Incoming& in);
  // The actor's worker is gone (`cause` says how): a waiting request is answered, the head told.
  void worker_gone(const WorkerPool::Worker& w, const std::string& cause);

 private:
  struct Hosted {
    std::string routing;  // the head's request, answered once the actor is constructed
    uint64_t req = 0;
    bool replied = false;
    std::shared_ptr<detail::InMessage> msg;  // the HostActor request (constructor arguments)
    std::string worker;
  };
  void start(const std::string& actor_id, const Res& release, Result<JobRunner::Job*> job);
  void constructed(const std::string& actor_id, const std::string& worker, const detail::InMessage& r);

  detail::Messenger& io_;
  const std::string& token_;
  const std::string& node_id_;
  Replies reply_;
  WorkerPool& workers_;
  LocalResources& res_;
  Node& node_;
  std::map<std::string, Hosted> hosted_;
};

}  // namespace yard::sched
