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

std::string text(const Wait& w) {
  std::string s = name(w.reason);
  for (auto& c : s) c = c == '_' ? ' ' : c;
  return w.detail.empty() ? s : s + ": " + w.detail;
}

}  // namespace yard::sched::policy
