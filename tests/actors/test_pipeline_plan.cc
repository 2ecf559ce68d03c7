// Pipeline model parallelism's pure parts: the split into stages, the 1F1B order, micro-batches,
// and the refusal of impossible pipelines.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "yard/actors/pipeline_plan.h"

using namespace yard::actors;

namespace {
double stage_cost(const std::vector<double>& c, StageSpan s) {
  return std::accumulate(c.begin() + s.first, c.begin() + s.end, 0.0);
}
}  // namespace

CATCH_TEST_CASE("stages are consecutive, non-empty and as balanced as whole layers allow", "[pipeline][plan]") {
  CATCH_CHECK(plan_stages({1, 1, 1, 1}, 2) == std::vector<StageSpan>{{0, 2}, {2, 4}});
  CATCH_CHECK(plan_stages({1, 1, 1, 1}, 4) == std::vector<StageSpan>{{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  // A costly first layer (it also embeds the input) gets a stage of its own.
  CATCH_CHECK(plan_stages({3, 1, 1, 1}, 2) == std::vector<StageSpan>{{0, 1}, {1, 4}});
  CATCH_CHECK(plan_stages({1, 1, 1, 1, 1}, 1) == std::vector<StageSpan>{{0, 5}});
  // Against every split of 7 layers into 3 stages: none has a cheaper costliest stage.
  std::vector<double> costs{2.5, 1, 4, 1.5, 0.5, 3, 2};
  auto plan = plan_stages(costs, 3);
  CATCH_REQUIRE(plan.size() == 3);
  CATCH_CHECK(plan.front().first == 0);
  CATCH_CHECK(plan.back().end == 7);
  double worst = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    CATCH_CHECK(plan[i].size() > 0);
    if (i > 0) CATCH_CHECK(plan[i].first == plan[i - 1].end);
    worst = std::max(worst, stage_cost(costs, plan[i]));
  }
  double best = 1e9;
  for (int a = 1; a < 7; ++a)
    for (int b = a + 1; b < 7; ++b)
      best = std::min(best, std::max({stage_cost(costs, {0, a}), stage_cost(costs, {a, b}), stage_cost(costs, {b, 7})}));
  CATCH_CHECK(worst == best);
}

CATCH_TEST_CASE("impossible pipelines are refused with the reason", "[pipeline][plan]") {
  CATCH_CHECK_THROWS_WITH(plan_stages({1, 1}, 3), Catch::Contains("3 pipeline stages for a model of 2 layers"));
  CATCH_CHECK_THROWS_WITH(plan_stages({1, 1}, 0), Catch::Contains("at least one stage"));
  CATCH_CHECK_THROWS_WITH(plan_stages({1, -1}, 1), Catch::Contains("layer 1"));
  CATCH_CHECK_THROWS_WITH(check_pipeline(2, 4, 8, 32), Catch::Contains("a stage would hold no layer"));
  CATCH_CHECK_THROWS_WITH(check_pipeline(4, 4, 2, 32), Catch::Contains("2 micro-batches for 4 pipeline stages"));
  CATCH_CHECK_THROWS_WITH(check_pipeline(4, 2, 8, 4), Catch::Contains("a batch of 4 samples cannot make 8 micro-batches"));
  CATCH_CHECK_NOTHROW(check_pipeline(4, 4, 4, 4));
  CATCH_CHECK_THROWS_AS(micro_batch_sizes(3, 4), PipelineError);
}

CATCH_TEST_CASE("1F1B: every forward before its backward, few micro-batches in flight, all of them run", "[pipeline][1f1b]") {
  CATCH_CHECK(one_f_one_b(0, 2, 3) == std::vector<PipeStep>{{PipeOp::kForward, 0}, {PipeOp::kForward, 1},
                                                            {PipeOp::kBackward, 0}, {PipeOp::kForward, 2},
                                                            {PipeOp::kBackward, 1}, {PipeOp::kBackward, 2}});
  CATCH_CHECK(one_f_one_b(1, 2, 2) == std::vector<PipeStep>{{PipeOp::kForward, 0}, {PipeOp::kBackward, 0},
                                                            {PipeOp::kForward, 1}, {PipeOp::kBackward, 1}});
  for (int stages : {1, 2, 3, 4, 6})
    for (int micro : {stages, stages + 1, 2 * stages, 8})
      for (int s = 0; s < stages; ++s) {
        auto order = one_f_one_b(s, stages, micro);
        CATCH_REQUIRE(order.size() == size_t(2 * micro));
        std::vector<int> forward_at(size_t(micro), -1), backward_at(size_t(micro), -1);
        int in_flight = 0, most = 0;
        for (size_t i = 0; i < order.size(); ++i) {
          auto& at = order[i].op == PipeOp::kForward ? forward_at : backward_at;
          CATCH_REQUIRE(at[size_t(order[i].micro)] == -1);
          at[size_t(order[i].micro)] = int(i);
          in_flight += order[i].op == PipeOp::kForward ? 1 : -1;
          most = std::max(most, in_flight);
        }
        for (int m = 0; m < micro; ++m) {
          CATCH_CHECK(forward_at[size_t(m)] >= 0);
          CATCH_CHECK(forward_at[size_t(m)] < backward_at[size_t(m)]);
          if (m > 0) CATCH_CHECK(forward_at[size_t(m) - 1] < forward_at[size_t(m)]);
          if (m > 0) CATCH_CHECK(backward_at[size_t(m) - 1] < backward_at[size_t(m)]);
        }
        CATCH_CHECK(most <= stages - s);
      }
}

CATCH_TEST_CASE("micro-batches cover the batch evenly; the ideal speed-up is the bubble's", "[pipeline][plan]") {
  CATCH_CHECK(micro_batch_sizes(32, 8) == std::vector<int64_t>(8, 4));
  CATCH_CHECK(micro_batch_sizes(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CATCH_CHECK(ideal_pipeline_speedup(1, 4) == 1.0);
  CATCH_CHECK(ideal_pipeline_speedup(2, 8) == Approx(2 / 1.125));
  CATCH_CHECK(ideal_pipeline_speedup(4, 4) == Approx(4 / 1.75));
}
