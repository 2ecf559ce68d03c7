// Why a request waits for capacity: one model for everything that waits (a queued job, an actor
// or a placement group no node holds yet, a lease), so that `yard jobs`, `yard status` and the
// dashboard say it the same way. Pure: no I/O.
#pragma once

#include <optional>
#include <string>

namespace yard::sched::policy {

enum class WaitReason {
  kNoRoom,          // some node could hold it, none has the room now
  kInfeasible,      // no node of the cluster could ever hold it
  kNodeStarting,    // no running node could hold it; a node the autoscaler adds would
  kFreeingRoom,     // room is being freed for it (replicas leaving, a job stopping)
  kHeld,            // held by a user (`yard job hold`)
  kTeamCeiling,     // its team would go over the ceiling of its quota
  kBehindInQueue,   // jobs ahead of it in the queue take the room there is
  kUnknownTeam,     // its team is not in the cluster's configuration
};

struct Wait {
  WaitReason reason = WaitReason::kNoRoom;
  std::string detail;  // what and where: "team research at its ceiling of CPU: 8"
};

// Whether a request no running node can hold (`why`) waits, and why: for a node the autoscaler
// can start (`could_add`), else for one to join when the cluster waits for such nodes
// (`infeasible_waits`: its [scheduling] infeasible setting); nullopt: it is refused.
std::optional<Wait> wait_for_nodes(bool could_add, bool infeasible_waits, const std::string& why);

// The reason's name as shown in `--json` output ("no_room", "team_ceiling", ...).
const char* name(WaitReason r);
// One line for people: "no room: needs CPU: 2 on one node" (the detail after the reason).
std::string text(const Wait& w);

}  // namespace yard::sched::policy
