// bench/run strategies, case pipeline_efficiency_p2_m8: a 2-stage pipeline (two actors, half the
// encoder layers each, the first also embedding the input and the last applying the heads) running
// 8 micro-batches per step under 1F1B with AdamW steps, on the railway model and a fixed batch,
// against the ideal for that schedule: single-process throughput on the same batch (one actor, the
// whole model, the whole batch at once) × P ÷ (1 + (P − 1) ÷ M). One JSON object per model on
// stdout: the job's 2 layers, and 4 (case pipeline_efficiency_p2_m8_layers4).
//
// Usage: pipeline_bench [STEPS]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "yard/actors/pipeline.h"
#include "yard/actors/trainer.h"
#include "yard/collective.h"
#include "bench_util.h"
#include "yard/railway/model.h"
#include "yard/railway/shards.h"
#include "yard/yard.h"

using namespace std::chrono_literals;

namespace {

constexpr int64_t kBatch = 64, kTokens = 128, kD = 64;
constexpr int kStages = 2, kMicro = 8;

struct Fixed {
  torch::Tensor x, y, tokens, a, w;
  Fixed() {
    torch::manual_seed(7);
    x = torch::randn({kBatch, kTokens, yard::railway::kFeatures});
    y = torch::randint(0, 5, {kBatch}, torch::kLong);
    tokens = torch::randint(0, 5, {kBatch, kTokens}, torch::kLong);
    a = torch::randn({kBatch});
    w = torch::ones({5});
  }
};

class PipeBenchRank {
 public:
  PipeBenchRank() = default;

  // The whole model on the whole batch in this process: seconds of `steps` steps after warm-up.
  // micro > 1: the batch as that many micro-batches, their gradients accumulated (the pipeline's
  // arithmetic without the pipeline).
  double single(int steps, int layers, int micro) {
    prepare();
    auto net = RailwayNet(yard::railway::kFeatures, kTokens, kD, layers);
    Fixed d;
    torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
    auto sizes = yard::actors::micro_batch_sizes(kBatch, micro);
    auto step = [&] {
      opt.zero_grad();
      int64_t at = 0;
      for (auto n : sizes) {
        auto part = [&](const torch::Tensor& t) { return t.narrow(0, at, n); };
        (railway_loss(net->forward(part(d.x)), part(d.y), part(d.tokens), part(d.a), d.w) * (double(n) / kBatch)).backward();
        at += n;
      }
      opt.step();
    };
    return yard::bench::timed(step, steps);
  }

  // Stage `stage` of the pipeline: {seconds of `steps` steps after warm-up, seconds of them spent
  // waiting for the other stage}.
  std::vector<double> stage(int stage, int steps, int layers) {
    prepare();
    auto net = RailwayNet(yard::railway::kFeatures, kTokens, kD, layers);
    Fixed d;
    auto sizes = yard::actors::micro_batch_sizes(kBatch, kMicro);
    std::vector<int64_t> offset{0};
    for (auto s : sizes) offset.push_back(offset.back() + s);
    auto span = yard::actors::plan_stages(std::vector<double>(size_t(layers), 1.0), kStages)[size_t(stage)];
    const bool first = stage == 0, last = stage == kStages - 1;
    std::vector<torch::Tensor> params;
    for (auto& [name, p] : net->part_parameters(span.first, span.end, first, last)) params.push_back(p);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3));
    yard::actors::PipelineStage pipe(stage, kStages,
                                     yard::actors::PipelineLinks::join(yard::collective::cluster_group("pipeline-bench", kStages, stage), stage, kStages));
    yard::actors::StageWork w;
    auto part = [&](int m, const torch::Tensor& t) { return t.narrow(0, offset[size_t(m)], sizes[size_t(m)]); };
    w.input = [&](int m) { return part(m, d.x); };
    w.input_shape = [&](int m) { return std::vector<int64_t>{kTokens, sizes[size_t(m)], kD}; };
    w.forward = [&](const torch::Tensor& x) { return net->layers(first ? net->embed(x) : x, span.first, span.end); };
    w.loss = [&](int m, const torch::Tensor& h) {
      return railway_loss(net->heads(h), part(m, d.y), part(m, d.tokens), part(m, d.a), d.w) * double(sizes[size_t(m)]) / double(kBatch);
    };
    auto step = [&] {
      opt.zero_grad();
      pipe.train(kMicro, w);
      opt.step();
    };
    double waited = 0;
    int n = 0;
    double s = yard::bench::timed([&] { step(), waited += (n++ >= 3 ? pipe.last_wait_seconds() : 0); }, steps);
    pipe.destroy();
    return {s, waited};
  }

 private:
  static void prepare() {
    torch::set_num_threads(1);
    yard::actors::keep_freed_memory();
    torch::manual_seed(1);
  }
};

// Samples per second of `copies` single processes running at once (each one's rate, averaged).
double single_throughput(int steps, int layers, int copies = 1, int micro = 1) {
  std::vector<yard::ActorHandle<PipeBenchRank>> ranks;
  std::vector<yard::ObjectRef<double>> secs;
  for (int c = 0; c < copies; ++c) ranks.push_back(yard::actor<PipeBenchRank>().resources({{"CPU", 1}}).remote());
  for (auto& r : ranks) secs.push_back(r.call(&PipeBenchRank::single).remote(steps, layers, micro));
  double rate = 0;
  for (auto& s : secs) rate += double(kBatch) * steps / *s.get(600s) / copies;
  for (auto& r : ranks) yard::kill(r);
  return rate;
}

struct Piped {
  double rate = 0, wait_frac = 0;  // samples/s; the share of the step the stages waited, averaged
};

Piped pipeline_throughput(int steps, int layers) {
  std::vector<yard::ActorHandle<PipeBenchRank>> ranks;
  std::vector<yard::ObjectRef<std::vector<double>>> secs;
  for (int s = 0; s < kStages; ++s) ranks.push_back(yard::actor<PipeBenchRank>().resources({{"CPU", 1}}).remote());
  for (int s = 0; s < kStages; ++s) secs.push_back(ranks[size_t(s)].call(&PipeBenchRank::stage).remote(s, steps, layers));
  double slowest = 0;
  Piped p;
  for (auto& s : secs) {
    auto v = *s.get(600s);
    slowest = std::max(slowest, v[0]);
    p.wait_frac += v[1] / v[0] / kStages;
  }
  for (auto& r : ranks) yard::kill(r);
  p.rate = double(kBatch) * steps / slowest;
  return p;
}

}  // namespace

YARD_ACTOR(PipeBenchRank, &PipeBenchRank::single, &PipeBenchRank::stage);

int main(int argc, char** argv) {
  yard::bench::init_training_cluster(argc, argv);
  int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  // The job's model (2 layers: one per stage, the second stage also running the heads and loss),
  // and a deeper one, where the heads weigh less against a stage's layers.
  for (int layers : {2, 4}) {
    // The single process on either side of the pipeline: a drift of the machine weighs on both alike.
    double single = single_throughput(steps, layers);
    auto piped = pipeline_throughput(steps, layers);
    single = (single + single_throughput(steps, layers)) / 2;
    double ideal = single * yard::actors::ideal_pipeline_speedup(kStages, kMicro);
    // What this machine gives two processes computing at once, without any communication: the
    // ceiling beneath the ideal that no two-process schedule can pass.
    double pair = single_throughput(steps, layers, 2);
    // One process on the pipeline's micro-batches (their gradients accumulated): what splitting the
    // batch costs by itself, beneath any schedule.
    double micro = single_throughput(steps, layers, 1, kMicro);
    std::printf("{\"suite\":\"strategies\",\"case\":\"pipeline_efficiency_p2_m8%s\",\"value\":%.4g,\"unit\":\"samples/s\","
                "\"peer\":\"ideal_1f1b_from_single_process\",\"peer_value\":%.4g,\"ratio\":%.4g,"
                "\"single_process_samples_per_s\":%.4g,\"two_concurrent_single_processes_samples_per_s_each\":%.4g,"
                "\"single_process_micro_batched_samples_per_s\":%.4g,"
                "\"stage_wait_frac\":%.3f,"
                "\"settings\":{\"model\":\"railway d64\",\"layers\":%d,\"batch\":%lld,\"stages\":%d,\"micro_batches\":%d,"
                "\"optimizer\":\"adamw\",\"torch_threads\":1,\"OMP_NUM_THREADS\":\"1\",\"OPENBLAS_NUM_THREADS\":\"1\","
                "\"malloc_retain\":\"both sides\"}}\n",
                layers == 2 ? "" : "_layers4", piped.rate, ideal, piped.rate / ideal, single, pair, micro, piped.wait_frac, layers,
                static_cast<long long>(kBatch), kStages, kMicro);
    std::fflush(stdout);
  }
  return 0;
}
