// The cluster's record states, one C++ enum each: what the head keeps of nodes, jobs, actors and
// placement groups, and what its replies say (the wire carries actor and group states as the
// Cap'n Proto enums of the same values; wire.h converts). Their names ("ALIVE", "RUNNING", ...)
// are what the control store's records, `yard status` and the logs show.
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include <optional>
#include <string_view>

namespace yard::states {

enum class NodeState { kAlive, kDraining, kDead };
// kQueued: a job with a shape waiting in the head's queue (`yard submit --replicas`).
enum class JobStatus { kRunning, kSucceeded, kFailed, kStopped, kQueued };
enum class ActorState { kPending, kAlive, kRestarting, kDead };
enum class GroupState { kPending, kCreated, kRescheduling, kRemoved };

const char* name(NodeState s);
const char* name(JobStatus s);
const char* name(ActorState s);
const char* name(GroupState s);
// The state a name stands for; nullopt for any other text (a record written by another version).
std::optional<NodeState> parse_node_state(std::string_view s);
std::optional<JobStatus> parse_job_status(std::string_view s);
std::optional<ActorState> parse_actor_state(std::string_view s);
std::optional<GroupState> parse_group_state(std::string_view s);

}  // namespace yard::states
