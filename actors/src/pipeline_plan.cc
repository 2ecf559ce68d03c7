#include "yard/actors/pipeline_plan.h"

#include <cmath>
#include <limits>
#include <string>

namespace yard::actors {

namespace {

std::string units_word(int n) { return std::to_string(n) + (n == 1 ? " layer" : " layers"); }

}  // namespace

void check_pipeline(int units, int stages, int micro_batches, int64_t batch) {
  if (stages < 1) throw PipelineError("a pipeline needs at least one stage, asked for " + std::to_string(stages));
  if (stages > units)
    throw PipelineError(std::to_string(stages) + " pipeline stages for a model of " + units_word(units) +
                        ": a stage would hold no layer (a layer is never split across stages)");
  if (micro_batches < stages)
    throw PipelineError(std::to_string(micro_batches) + " micro-batches for " + std::to_string(stages) +
                        " pipeline stages: the pipeline would never fill (use at least as many micro-batches "
                        "as stages, several times as many to keep the bubble small)");
  if (batch < micro_batches)
    throw PipelineError("a batch of " + std::to_string(batch) + " samples cannot make " + std::to_string(micro_batches) +
                        " micro-batches");
}

std::vector<StageSpan> plan_stages(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1) throw PipelineError("a pipeline needs at least one stage, asked for " + std::to_string(stages));
  if (stages > n)
    throw PipelineError(std::to_string(stages) + " pipeline stages for a model of " + units_word(n) +
                        ": a stage would hold no layer (a layer is never split across stages)");
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(costs[size_t(i)]) || costs[size_t(i)] < 0)
      throw PipelineError("layer " + std::to_string(i) + " has no usable cost (" + std::to_string(costs[size_t(i)]) + ")");
  std::vector<double> prefix(size_t(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + costs[size_t(i)];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest possible largest stage cost of the first i units in k stages;
  // cut[k][i]: where its last stage starts (the latest such start: later stages get fewer units).
  std::vector<std::vector<double>> best(size_t(stages) + 1, std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(stages) + 1, std::vector<int>(size_t(n) + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        double c = std::max(best[size_t(k) - 1][size_t(j)], prefix[size_t(i)] - prefix[size_t(j)]);
        if (c <= best[size_t(k)][size_t(i)]) best[size_t(k)][size_t(i)] = c, cut[size_t(k)][size_t(i)] = j;
      }
  std::vector<StageSpan> spans(static_cast<size_t>(stages));
  for (int k = stages, end = n; k >= 1; --k) {
    int first = cut[size_t(k)][size_t(end)];
    spans[size_t(k) - 1] = {first, end};
    end = first;
  }
  return spans;
}

std::vector<PipeStep> one_f_one_b(int stage, int stages, int micro_batches) {
  std::vector<PipeStep> order;
  int warmup = std::min(stages - stage - 1, micro_batches), forward = 0, backward = 0;
  for (; forward < warmup; ++forward) order.push_back({PipeOp::kForward, forward});
  for (; forward < micro_batches; ++forward, ++backward) {
    order.push_back({PipeOp::kForward, forward});
    order.push_back({PipeOp::kBackward, backward});
  }
  for (; backward < micro_batches; ++backward) order.push_back({PipeOp::kBackward, backward});
  return order;
}

std::vector<int64_t> micro_batch_sizes(int64_t batch, int micro_batches) {
  if (micro_batches < 1) throw PipelineError("at least one micro-batch, asked for " + std::to_string(micro_batches));
  if (batch < micro_batches)
    throw PipelineError("a batch of " + std::to_string(batch) + " samples cannot make " + std::to_string(micro_batches) +
                        " micro-batches");
  std::vector<int64_t> sizes(size_t(micro_batches), batch / micro_batches);
  for (int64_t i = 0; i < batch % micro_batches; ++i) ++sizes[size_t(i)];
  return sizes;
}

double ideal_pipeline_speedup(int stages, int micro_batches) {
  return stages / (1.0 + double(stages - 1) / double(micro_batches));
}

}  // namespace yard::actors
