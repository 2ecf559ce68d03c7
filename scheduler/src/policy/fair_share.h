// Fair sharing between teams and what a team may submit. Pure: no I/O, no clock (times are
// passed in).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "policy/queue.h"

namespace yard::sched::policy {

// A team's share of the pool: the largest fraction it holds of any resource the pool has
// (dominant share; memory counts like any other).
double dominant_share(const Res& usage, const Res& pool_total);

// Usage that fades: after `dt` seconds at `share`, the old usage has decayed by half every
// `half_life_s` and the new share is added for the time it was held. A team that was busy long
// ago then ranks like one that was idle.
double decay_usage(double usage, double share, double dt, double half_life_s);

// The order value of a team: decayed usage over weight (lower goes first). A weight of 0 ranks
// last.
double fair_rank(double usage, double weight);

// What each active team is owed of the pool: its weight over the active teams' weights.
std::vector<double> weighted_shares(const std::vector<double>& weights);

enum class Refusal { kUnknownTeam, kPriorityTooHigh, kQueueFull, kBadShape };
struct SubmitRefusal {
  Refusal kind;
  std::string message;  // says what and the limit: "team research may use priority 5 at most, not 9"
};
// Whether a job of `team` at `priority` with `shape` may join the queue, given the team's jobs
// waiting already. With no teams configured, any team and priority are taken.
std::optional<SubmitRefusal> check_submission(const std::vector<TeamQuota>& teams, const std::string& team,
                                              int priority, const JobShape& shape, int team_queued);

}  // namespace yard::sched::policy
