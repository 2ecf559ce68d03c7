#include "yard/internal/states.h"

#include <utility>

namespace yard::states {

namespace {

template <class E, size_t N>
std::optional<E> parse_name(std::string_view s, const std::pair<E, const char*> (&names)[N]) {
  for (auto& [e, n] : names)
    if (s == n) return e;
  return std::nullopt;
}
template <class E, size_t N>
const char* name_of(E e, const std::pair<E, const char*> (&names)[N]) {
  for (auto& [x, n] : names)
    if (x == e) return n;
  return "?";
}

const std::pair<NodeState, const char*> kNodeStates[] = {
    {NodeState::kAlive, "ALIVE"}, {NodeState::kDraining, "DRAINING"}, {NodeState::kDead, "DEAD"}};
const std::pair<JobStatus, const char*> kJobStatuses[] = {{JobStatus::kRunning, "RUNNING"},
                                                          {JobStatus::kSucceeded, "SUCCEEDED"},
                                                          {JobStatus::kFailed, "FAILED"},
                                                          {JobStatus::kStopped, "STOPPED"},
                                                          {JobStatus::kQueued, "QUEUED"}};
const std::pair<ActorState, const char*> kActorStates[] = {{ActorState::kPending, "PENDING"},
                                                           {ActorState::kAlive, "ALIVE"},
                                                           {ActorState::kRestarting, "RESTARTING"},
                                                           {ActorState::kDead, "DEAD"}};
const std::pair<GroupState, const char*> kGroupStates[] = {{GroupState::kPending, "PENDING"},
                                                           {GroupState::kCreated, "CREATED"},
                                                           {GroupState::kRescheduling, "RESCHEDULING"},
                                                           {GroupState::kRemoved, "REMOVED"}};

}  // namespace

const char* name(NodeState s) { return name_of(s, kNodeStates); }
const char* name(JobStatus s) { return name_of(s, kJobStatuses); }
const char* name(ActorState s) { return name_of(s, kActorStates); }
const char* name(GroupState s) { return name_of(s, kGroupStates); }
std::optional<NodeState> parse_node_state(std::string_view s) { return parse_name(s, kNodeStates); }
std::optional<JobStatus> parse_job_status(std::string_view s) { return parse_name(s, kJobStatuses); }
std::optional<ActorState> parse_actor_state(std::string_view s) { return parse_name(s, kActorStates); }
std::optional<GroupState> parse_group_state(std::string_view s) { return parse_name(s, kGroupStates); }

}  // namespace yard::states
