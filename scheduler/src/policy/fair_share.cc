#include "policy/fair_share.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace yard::sched::policy {

double dominant_share(const Res& usage, const Res& pool_total) {
  double s = 0;
  for (auto& [k, t] : pool_total) {
    if (t <= 0) continue;
    auto it = usage.find(k);
    if (it != usage.end()) s = std::max(s, it->second / t);
  }
  return s;
}

double decay_usage(double usage, double share, double dt, double half_life_s) {
  if (dt <= 0) return usage;
  double keep = half_life_s > 0 ? std::exp2(-dt / half_life_s) : 0.0;
  return usage * keep + share * dt;
}

double fair_rank(double usage, double weight) {
  if (weight <= 0) return std::numeric_limits<double>::infinity();
  return usage / weight;
}

std::vector<double> weighted_shares(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += std::max(w, 0.0);
  std::vector<double> out;
  for (double w : weights) out.push_back(sum > 0 ? std::max(w, 0.0) / sum : 0.0);
  return out;
}

std::optional<SubmitRefusal> check_submission(const std::vector<TeamQuota>& teams, const std::string& team,
                                              int priority, const JobShape& shape, int team_queued) {
  if (shape.min < 0 || shape.max < shape.min)
    return SubmitRefusal{Refusal::kBadShape, "replicas " + std::to_string(shape.min) + ":" + std::to_string(shape.max) +
                                                 ": MIN must be at least 0 and at most MAX"};
  if (teams.empty()) return std::nullopt;
  auto t = std::find_if(teams.begin(), teams.end(), [&](const TeamQuota& q) { return q.name == team; });
  if (t == teams.end()) {
    std::string known;
    for (auto& q : teams) known += (known.empty() ? "" : ", ") + q.name;
    return SubmitRefusal{Refusal::kUnknownTeam, "no team '" + team + "' in the cluster's configuration (teams: " + known + ")"};
  }
  if (priority > t->max_priority)
    return SubmitRefusal{Refusal::kPriorityTooHigh, "team " + team + " may use priority " +
                                                        std::to_string(t->max_priority) + " at most, not " +
                                                        std::to_string(priority)};
  if (t->max_queued > 0 && team_queued >= t->max_queued)
    return SubmitRefusal{Refusal::kQueueFull, "team " + team + " has " + std::to_string(team_queued) + " job" +
                                                  (team_queued == 1 ? "" : "s") + " waiting in the queue, its limit (max_queued = " +
                                                  std::to_string(t->max_queued) + ")"};
  if (!t->ceiling.empty() && !fits(shape.total(shape.min), t->ceiling))
    return SubmitRefusal{Refusal::kBadShape, "the job needs " + res_text(shape.total(shape.min)) +
                                                 " at MIN, over team " + team + "'s ceiling of " + res_text(t->ceiling)};
  return std::nullopt;
}

}  // namespace yard::sched::policy
