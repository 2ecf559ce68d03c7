// The job queue's policies as specifications (scheduler/src/policy/queue.h): a pool, teams and
// jobs in, admissions, growth, victims and reasons to wait out. No Redis, no processes.
#include <catch2/catch.hpp>

#include <algorithm>

#include "policy/fair_share.h"
#include "policy/queue.h"

using namespace yard::sched;
using namespace yard::sched::policy;

namespace {

// Nodes of `slots` CPUs each, with `free` of them free.
ClusterView pool(std::vector<std::pair<double, double>> slots_free) {
  ClusterView v;
  int i = 0;
  for (auto [slots, free] : slots_free)
    v.nodes.push_back({"n" + std::to_string(++i), {{"CPU", slots}}, {{"CPU", free}}, 0});
  return v;
}

JobShape elastic(int min, int max, int fixed_parts = 0) {
  JobShape s;
  s.fixed.assign(static_cast<size_t>(fixed_parts), Res{{"CPU", 1}});
  s.replica = {{"CPU", 1}};
  s.min = min;
  s.max = max;
  return s;
}

QueuedJob queued(std::string id, int priority, JobShape shape, std::string team = "", double at = 0) {
  return {std::move(id), std::move(team), priority, at, std::move(shape), false};
}

RunningJob running(std::string id, int priority, JobShape shape, std::vector<std::string> replicas,
                   std::string team = "", double admitted = 0) {
  RunningJob r;
  r.id = std::move(id);
  r.team = std::move(team);
  r.priority = priority;
  r.admitted_at = admitted;
  r.shape = std::move(shape);
  r.replica_nodes = std::move(replicas);
  return r;
}

const Waiting* waiting(const QueueDecision& d, const std::string& job) {
  for (auto& w : d.waiting)
    if (w.job == job) return &w;
  return nullptr;
}

const Victim* victim(const QueueDecision& d, const std::string& job) {
  for (auto& v : d.preempt)
    if (v.job == job) return &v;
  return nullptr;
}

TeamQuota team(std::string name, Res guarantee = {}, Res ceiling = {}, int max_priority = 10, double weight = 1) {
  return {std::move(name), weight, std::move(guarantee), std::move(ceiling), max_priority, 0};
}

}  // namespace

TEST_CASE("a job is admitted when its fixed parts and MIN replicas fit together, and grows toward MAX") {
  QueueInput in;
  in.pool = pool({{2, 2}, {2, 2}});
  in.queued = {queued("j", 0, elastic(2, 3, 1))};
  auto d = schedule_queue(in);
  REQUIRE(d.admit.size() == 1);
  CHECK(d.admit[0].fixed_nodes.size() == 1);
  CHECK(d.admit[0].replica_nodes.size() == 2);
  REQUIRE(d.grow.size() == 1);  // the fourth CPU takes a third replica
  CHECK(d.grow[0].nodes.size() == 1);
  CHECK(d.waiting.empty());
}

TEST_CASE("a gang that does not fit whole waits, holding nothing") {
  QueueInput in;
  in.pool = pool({{2, 1}, {2, 1}});
  in.queued = {queued("j", 0, elastic(2, 2, 1))};  // needs 3 CPUs, 2 are free
  auto d = schedule_queue(in);
  CHECK(d.admit.empty());
  CHECK(d.grow.empty());
  REQUIRE(waiting(d, "j"));
  CHECK(waiting(d, "j")->why.reason == WaitReason::kNoRoom);
  CHECK(text(waiting(d, "j")->why).find("needs CPU: 3") != std::string::npos);
}

TEST_CASE("a job no node could ever hold is infeasible, with the reason") {
  QueueInput in;
  in.pool = pool({{2, 2}});
  JobShape s = elastic(1, 1);
  s.replica = {{"GPU", 1}};
  in.queued = {queued("j", 0, s)};
  auto d = schedule_queue(in);
  REQUIRE(waiting(d, "j"));
  CHECK(waiting(d, "j")->why.reason == WaitReason::kInfeasible);
  CHECK(waiting(d, "j")->why.detail.find("GPU") != std::string::npos);
  // With an autoscaler whose node types hold it, the job waits for a node to be added instead.
  in.node_types = {{"gpu", {{"CPU", 8}, {"GPU", 1}}, 0, 2}};
  d = schedule_queue(in);
  CHECK(waiting(d, "j")->why.reason == WaitReason::kNodeStarting);
  CHECK(text(waiting(d, "j")->why).rfind("node starting: no running node could hold it", 0) == 0);
  // Node types that hold only some of its parts do not make it feasible.
  in.queued[0].shape.fixed = {Res{{"TPU", 1}}};
  CHECK(waiting(schedule_queue(in), "j")->why.reason == WaitReason::kInfeasible);
}

TEST_CASE("the queue orders by priority, then the team's fair share, then the time queued") {
  QueueInput in;
  in.teams = {team("a"), team("b", {}, {}, 10, 2)};
  in.fair_usage = {{"a", 10}, {"b", 10}};  // b's weight 2 halves its rank
  in.queued = {queued("a-old", 1, elastic(1, 1), "a", 1), queued("b-new", 1, elastic(1, 1), "b", 5),
               queued("a-high", 3, elastic(1, 1), "a", 9), queued("a-older", 1, elastic(1, 1), "a", 0)};
  std::vector<std::string> ids;
  for (size_t i : queue_order(in)) ids.push_back(in.queued[i].id);
  CHECK(ids == std::vector<std::string>{"a-high", "b-new", "a-older", "a-old"});
}

TEST_CASE("a job that cannot be admitted does not block smaller ones behind it") {
  QueueInput in;
  in.pool = pool({{2, 2}});
  in.queued = {queued("big", 5, elastic(3, 3)), queued("small", 0, elastic(1, 1))};
  auto d = schedule_queue(in);
  REQUIRE(d.admit.size() == 1);
  CHECK(d.admit[0].job == "small");
  CHECK(waiting(d, "big")->why.reason == WaitReason::kNoRoom);
}

TEST_CASE("held jobs, unknown teams and a team's ceiling each say why they wait") {
  QueueInput in;
  in.pool = pool({{8, 8}});
  in.teams = {team("a", {}, {{"CPU", 2}})};
  in.running = {running("r", 0, elastic(1, 1), {"n1"}, "a")};
  in.queued = {queued("over", 0, elastic(2, 2), "a"), queued("nobody", 0, elastic(1, 1), "x"),
               queued("held", 0, elastic(1, 1), "a")};
  in.queued[2].held = true;
  auto d = schedule_queue(in);
  CHECK(d.admit.empty());
  CHECK(waiting(d, "over")->why.reason == WaitReason::kTeamCeiling);
  CHECK(waiting(d, "over")->why.detail.find("ceiling of CPU: 2") != std::string::npos);
  CHECK(waiting(d, "nobody")->why.reason == WaitReason::kUnknownTeam);
  CHECK(waiting(d, "held")->why.reason == WaitReason::kHeld);
}

TEST_CASE("a job's actors beyond its shape count against its team: ceilings and fair share see them") {
  QueueInput in;
  in.pool = pool({{8, 4}});
  in.teams = {team("a", {}, {{"CPU", 3}}), team("b")};
  in.running = {running("r", 0, elastic(1, 1), {"n1"}, "a")};  // its shape: one CPU
  in.queued = {queued("next", 0, elastic(1, 1), "a")};
  CHECK(team_usage(in.running)["a"]["CPU"] == 1);
  CHECK(schedule_queue(in).admit.size() == 1);
  // Its actors hold three CPUs and a GPU beyond the shape's one CPU: the team is at its ceiling.
  in.running[0].held = {{"CPU", 3}, {"GPU", 1}};
  auto u = team_usage(in.running);
  CHECK(u["a"]["CPU"] == 3);
  CHECK(u["a"]["GPU"] == 1);
  auto d = schedule_queue(in);
  CHECK(d.admit.empty());
  CHECK(waiting(d, "next")->why.reason == WaitReason::kTeamCeiling);
  // Holding less than the shape (replicas not started yet) still counts the shape.
  in.running[0].held = {{"CPU", 0.5}};
  CHECK(team_usage(in.running)["a"]["CPU"] == 1);
}

TEST_CASE("a high-priority job shrinks elastic jobs above MIN instead of stopping them") {
  // 4 slots on 2 nodes, full with two low-priority jobs at MAX 2 (MIN 1).
  QueueInput in;
  in.pool = pool({{2, 0}, {2, 0}});
  in.running = {running("low1", 0, elastic(1, 2), {"n1", "n2"}, "", 1),
                running("low2", 0, elastic(1, 2), {"n1", "n2"}, "", 2)};
  in.queued = {queued("high", 5, elastic(2, 2))};
  auto d = schedule_queue(in);
  CHECK(d.admit.empty());
  REQUIRE(d.preempt.size() == 2);
  for (auto& v : d.preempt) {
    CHECK(v.kind == VictimKind::kShrink);
    CHECK(v.nodes.size() == 1);  // each keeps its MIN
    CHECK(v.for_job == "high");
  }
  CHECK(waiting(d, "high")->why.reason == WaitReason::kFreeingRoom);
  CHECK(d.grow.empty());  // nobody grows into the room being freed

  SECTION("while the replicas leave, no further victims are chosen and the room is kept") {
    in.running[0].releasing = {d.preempt[0].job == "low1" ? d.preempt[0].nodes[0] : d.preempt[1].nodes[0]};
    in.running[1].releasing = {d.preempt[0].job == "low2" ? d.preempt[0].nodes[0] : d.preempt[1].nodes[0]};
    in.queued.push_back(queued("later", 0, elastic(1, 1), "", 9));  // may not preempt the low jobs
    auto again = schedule_queue(in);
    CHECK(again.preempt.empty());
    CHECK(waiting(again, "high")->why.reason == WaitReason::kFreeingRoom);
    CHECK(waiting(again, "later")->why.reason != WaitReason::kFreeingRoom);
  }
  SECTION("victims gone from the queue's books but not yet from the pool's picture: no more victims for a while") {
    // low2's replica has left (the queue's record), the pool does not show its slot free yet.
    in.running[0].releasing = {d.preempt[0].job == "low1" ? d.preempt[0].nodes[0] : d.preempt[1].nodes[0]};
    in.running[1].replica_nodes = {"n1"};
    in.now = 100;
    in.queued[0].freeing_since = 99;
    in.pool = pool({{2, 0}, {2, 1}});  // (the slot low2 left, which nobody may grow into meanwhile)
    auto again = schedule_queue(in);
    CHECK(again.preempt.empty());
    CHECK(again.grow.empty());
    CHECK(waiting(again, "high")->why.reason == WaitReason::kFreeingRoom);
    in.pool = pool({{2, 0}, {2, 0}});
    // Past the settle time with still no room, victims are chosen again (here: stopping a job).
    in.queued[0].freeing_since = 100 - kVictimSettleS - 1;
    again = schedule_queue(in);
    CHECK_FALSE(again.preempt.empty());
  }
  SECTION("once they are gone, the job is admitted and the shrunk jobs do not grow back over it") {
    in.pool = pool({{2, 1}, {2, 1}});
    in.running[0].replica_nodes = {"n1"};
    in.running[1].replica_nodes = {"n2"};
    auto again = schedule_queue(in);
    REQUIRE(again.admit.size() == 1);
    CHECK(again.admit[0].job == "high");
    CHECK(again.grow.empty());
    CHECK(again.preempt.empty());
  }
}

TEST_CASE("a job at MIN is stopped only when shrinking others cannot make room") {
  QueueInput in;
  in.pool = pool({{2, 0}});
  in.running = {running("atmin", 0, elastic(1, 1, 1), {"n1"})};
  in.running[0].fixed_nodes = {"n1"};
  in.queued = {queued("high", 5, elastic(2, 2))};
  auto d = schedule_queue(in);
  REQUIRE(d.preempt.size() == 1);
  CHECK(d.preempt[0].kind == VictimKind::kStop);
  CHECK(d.preempt[0].job == "atmin");
  // A job that cannot be stopped whole is only shrunk: here nothing makes room, and the job waits.
  in.running[0].can_stop = false;
  d = schedule_queue(in);
  CHECK(d.preempt.empty());
  CHECK(waiting(d, "high")->why.reason == WaitReason::kNoRoom);
}

TEST_CASE("equal priority in one team preempts nothing; a minimum run time protects a job") {
  QueueInput in;
  in.pool = pool({{2, 0}});
  in.running = {running("r", 3, elastic(1, 2), {"n1", "n1"})};
  in.queued = {queued("q", 3, elastic(1, 1))};
  CHECK(schedule_queue(in).preempt.empty());
  in.queued[0].priority = 4;
  CHECK(schedule_queue(in).preempt.size() == 1);
  in.running[0].exempt_until = 10;
  in.now = 5;
  auto d = schedule_queue(in);
  CHECK(d.preempt.empty());
  CHECK(waiting(d, "q")->why.reason == WaitReason::kNoRoom);
}

TEST_CASE("a team reclaims its lent guarantee from a borrowing team, whatever the priorities") {
  QueueInput in;
  in.pool = pool({{2, 0}, {2, 0}});
  in.teams = {team("a", {{"CPU", 2}}), team("b", {{"CPU", 2}})};
  in.running = {running("b-job", 9, elastic(1, 4), {"n1", "n1", "n2", "n2"}, "b")};
  in.queued = {queued("a-job", 0, elastic(2, 2), "a")};
  auto d = schedule_queue(in);
  REQUIRE(victim(d, "b-job"));
  CHECK(victim(d, "b-job")->kind == VictimKind::kShrink);
  CHECK(victim(d, "b-job")->nodes.size() == 2);
}

TEST_CASE("no team is taken below its guarantee for another, even by a higher priority") {
  QueueInput in;
  in.pool = pool({{2, 0}, {2, 2}});
  in.teams = {team("a"), team("b", {{"CPU", 2}})};
  in.running = {running("b-job", 0, elastic(0, 2), {"n1", "n1"}, "b")};
  in.queued = {queued("a-job", 9, elastic(3, 3), "a")};
  auto d = schedule_queue(in);
  CHECK(d.preempt.empty());
  CHECK(waiting(d, "a-job")->why.reason == WaitReason::kNoRoom);
  // Within one team, priority decides.
  in.queued[0].team = "b";
  CHECK(schedule_queue(in).preempt.size() == 1);
}

TEST_CASE("victims the job does not need are given back") {
  // The job needs a whole node (2 CPUs). Greedy order takes the lowest priority first (on n1,
  // where it does not help alone), then one on n2, which is enough: the first is given back.
  QueueInput in;
  in.pool = pool({{2, 0}, {2, 1}});
  JobShape one = elastic(0, 1);
  in.running = {running("p0", 0, one, {"n1"}), running("p2", 2, one, {"n1"}), running("p1", 1, one, {"n2"})};
  JobShape whole = elastic(1, 1);
  whole.replica = {{"CPU", 2}};
  in.queued = {queued("q", 5, whole)};
  auto d = schedule_queue(in);
  REQUIRE(d.preempt.size() == 1);
  CHECK(d.preempt[0].job == "p1");
}

TEST_CASE("a job waiting past the starvation bound runs at its team's highest priority") {
  QueueInput in;
  in.teams = {team("a", {}, {}, 7)};
  in.queued = {queued("old", 1, elastic(1, 1), "a", 0), queued("new", 5, elastic(1, 1), "a", 50)};
  in.now = 60;
  in.starvation_s = 100;
  CHECK(effective_priority(in, in.queued[0]) == 1);
  CHECK(in.queued[queue_order(in)[0]].id == "new");
  in.now = 120;
  CHECK(effective_priority(in, in.queued[0]) == 7);
  CHECK(in.queued[queue_order(in)[0]].id == "old");
}

TEST_CASE("free room grows running jobs one replica each per round, within their ceilings") {
  QueueInput in;
  in.pool = pool({{4, 3}});
  in.teams = {team("a", {}, {{"CPU", 2}}), team("b")};
  in.running = {running("a1", 0, elastic(1, 4), {"n1"}, "a"), running("b1", 0, elastic(1, 4), {}, "b")};
  in.running[1].replica_nodes = {};  // b1 at 0 replicas of MAX 4 (MIN 1 on paper: a job being restored)
  auto d = schedule_queue(in);
  int a = 0, b = 0;
  for (auto& g : d.grow) (g.job == "a1" ? a : b) += static_cast<int>(g.nodes.size());
  CHECK(a == 1);  // the ceiling of 2 CPUs
  CHECK(b == 2);
}

TEST_CASE("fair share: usage decays by half every half-life, ranks by weight, shares by weight") {
  CHECK(decay_usage(8, 0, 10, 10) == Approx(4));
  CHECK(decay_usage(0, 0.5, 4, 10) == Approx(2));
  CHECK(fair_rank(4, 2) == Approx(2));
  CHECK(std::isinf(fair_rank(1, 0)));
  auto s = weighted_shares({1, 1, 2});
  CHECK(s[2] == Approx(0.5));
  CHECK(dominant_share({{"CPU", 2}, {"GPU", 1}}, {{"CPU", 8}, {"GPU", 2}}) == Approx(0.5));
}

TEST_CASE("a submission is refused with the limit it breaks") {
  std::vector<TeamQuota> teams = {team("a", {}, {{"CPU", 4}}, 5)};
  teams[0].max_queued = 2;
  CHECK(!check_submission({}, "anyone", 100, elastic(1, 2), 50));
  CHECK(check_submission(teams, "b", 0, elastic(1, 1), 0)->kind == Refusal::kUnknownTeam);
  auto high = check_submission(teams, "a", 9, elastic(1, 1), 0);
  REQUIRE(high);
  CHECK(high->kind == Refusal::kPriorityTooHigh);
  CHECK(high->message == "team a may use priority 5 at most, not 9");
  CHECK(check_submission(teams, "a", 1, elastic(1, 1), 2)->kind == Refusal::kQueueFull);
  CHECK(check_submission(teams, "a", 1, elastic(5, 5), 0)->kind == Refusal::kBadShape);
  CHECK(check_submission(teams, "a", 1, elastic(3, 2), 0)->kind == Refusal::kBadShape);
  CHECK(!check_submission(teams, "a", 5, elastic(1, 8), 1));
}

TEST_CASE("a spot notice: replicas above MIN leave, at MIN they move where there is room, else the job stops") {
  QueueInput in;
  // n1 is noticed (it takes no work: nothing free there); n2 has one free slot.
  in.pool = pool({{4, 0}, {4, 1}});
  in.running = {running("wide", 0, elastic(1, 3), {"n1", "n1", "n2"}), running("narrow", 0, elastic(1, 1), {"n1"}),
                running("fixed", 0, elastic(1, 1, 1), {"n2"}), running("elsewhere", 0, elastic(1, 1), {"n2"})};
  in.running[2].fixed_nodes = {"n1"};
  auto p = plan_notice(in, "n1");
  // wide: 3 replicas, MIN 1; both on n1 leave (it keeps the one on n2).
  REQUIRE(p.leave.size() == 1);
  CHECK(p.leave[0].job == "wide");
  CHECK(p.leave[0].nodes == std::vector<std::string>{"n1", "n1"});
  // narrow: at MIN; its one replica moves to n2's free slot.
  REQUIRE(p.move.size() == 1);
  CHECK(p.move[0].job == "narrow");
  CHECK(p.move[0].from == std::vector<std::string>{"n1"});
  CHECK(p.move[0].to == std::vector<std::string>{"n2"});
  // fixed: its driver is on n1: stopped and requeued. elsewhere: untouched.
  CHECK(p.stop == std::vector<std::string>{"fixed"});
  // No room left for a second job at MIN: it stops.
  in.running.push_back(running("narrow2", 0, elastic(1, 1), {"n1"}));
  p = plan_notice(in, "n1");
  CHECK(p.stop == std::vector<std::string>{"fixed", "narrow2"});
  // A job already stopping is left alone; room being freed counts as room elsewhere.
  in.running[2].stopping = true;
  in.running[3].stopping = true;  // frees its slot on n2
  p = plan_notice(in, "n1");
  CHECK(p.stop.empty());
  CHECK(p.move.size() == 2);
}

TEST_CASE("what no running node can hold waits for a node the autoscaler starts, or for one to join, or is refused") {
  auto starting = wait_for_nodes(true, false, "GPU: 4 wanted");
  REQUIRE(starting);
  CHECK(starting->reason == WaitReason::kNodeStarting);
  CHECK(starting->detail.find("GPU: 4 wanted") != std::string::npos);
  auto joining = wait_for_nodes(false, true, "GPU: 4 wanted");
  REQUIRE(joining);
  CHECK(joining->reason == WaitReason::kInfeasible);
  CHECK(text(*joining) == "infeasible: GPU: 4 wanted");
  CHECK_FALSE(wait_for_nodes(false, false, "GPU: 4 wanted"));
}
