#include "policy/waiting.h"

namespace yard::sched::policy {

const char* name(WaitReason r) {
  switch (r) {
    case WaitReason::kNoRoom: return "no_room";
    case WaitReason::kInfeasible: return "infeasible";
    case WaitReason::kNodeStarting: return "node_starting";
    case WaitReason::kFreeingRoom: return "freeing_room";
    case WaitReason::kHeld: return "held";
    case WaitReason::kTeamCeiling: return "team_ceiling";
    case WaitReason::kBehindInQueue: return "behind_in_queue";
    case WaitReason::kUnknownTeam: return "unknown_team";
  }
  return "?";
}

std::optional<Wait> wait_for_nodes(bool could_add, bool infeasible_waits, const std::string& why) {
  if (could_add) return Wait{WaitReason::kNodeStarting, "no running node can hold it, the autoscaler can start one (" + why + ")"};
  if (infeasible_waits) return Wait{WaitReason::kInfeasible, why};
  return std::nullopt;
}

std::string text(const Wait& w) {
  std::string s = name(w.reason);
  for (auto& c : s) c = c == '_' ? ' ' : c;
  return w.detail.empty() ? s : s + ": " + w.detail;
}

}  // namespace yard::sched::policy
