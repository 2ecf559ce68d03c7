// Requests to the cluster's head service: a driver's registration (its binary uploaded once,
// content-addressed) and the end of its job, placement groups, where the control store is.
// Actor requests go through the actor submitter. Callable from any thread but the I/O thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "head_address.h"
#include "messenger.h"
#include "yard/internal/control_client.h"

namespace yard::detail {

class HeadClient {
 public:
  // `node`: the node manager asked where the head is when it does not answer.
  // `name_space`: the process's (a driver's as it was given, "" : the job's own, until it has
  // registered).
  HeadClient(Messenger& io, const std::string& token, HeadAddress& head, const std::string& node,
             const std::string& job_id, const std::string& name_space)
      : io_(io), token_(token), head_(head), node_(node), job_id_(job_id), name_space_(name_space) {}

  struct Registration {
    std::string job_id, node_id, node_address;  // node_address: where its leases go
  };
  // Uploads this program unless the head has it, then registers a job for it. Throws
  // ConnectionError (unreachable, refused) or AuthError (wrong token).
  // `detached_actors`: the job's actors that choose no lifetime outlive it.
  Registration register_driver(std::chrono::milliseconds timeout, bool detached_actors = false);
  // The driver is done: the head ends its job (its actors and workers stop).
  void finish_job();

  // True when it was created at once.
  bool create_placement_group(const std::string& id, wire::PlacementStrategy strategy,
                              const std::vector<std::map<std::string, double>>& bundles, const std::string& name);
  // State and bundle nodes once created (or the timeout passed: state PENDING).
  std::pair<states::GroupState, std::vector<std::string>> wait_placement_group(const std::string& id,
                                                                        std::chrono::milliseconds timeout);
  void remove_placement_group(const std::string& id);
  // The control store's address and password.
  ControlStoreAccess control_store();
  // Ends an actor for good, saying why (yard::exit_actor from inside it); waits for the head.
  void end_actor(const std::string& id, const std::string& cause);

 private:
  // The program's digest once the head has its bytes ("" when it could not take them: nodes then
  // use the path).
  std::string upload_binary(std::chrono::milliseconds timeout);
  Messenger& io_;
  const std::string& token_;
  // A request to the head; one unanswered, or answered "unavailable", has the node asked where
  // the head is now, for the next request.
  std::unique_ptr<InMessage> ask_head(OutMessage& m, uint64_t rid, std::chrono::milliseconds timeout);
  HeadAddress& head_;
  const std::string& node_;
  const std::string& job_id_;
  const std::string& name_space_;
};

}  // namespace yard::detail
