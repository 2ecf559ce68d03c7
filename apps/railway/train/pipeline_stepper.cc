// The pipeline strategy: each replica's encoder layers split over its trainers (stages), the
// step's batches run as micro-batches under 1F1B (yard::actors::PipelineStage), gradients averaged
// over the replicas of each stage (hybrid data x pipeline; all-reduced during the last backward),
// clipped by the norm over all stages, and each stage's optimizer stepping its own part.
//
// Every stage builds only its part of the model (RailwayNet's keep range: its encoder layers, and
// the small embedding and heads), starting as the single-process model's part does under the
// job's seed. The split comes first, from layer times measured on a one-layer model. A checkpoint
// gathers the parts on stage 0 of the first replica (rank 0), which writes the whole model's state
// (the same "model" blob as every strategy's) and each stage's optimizer state
// ("optimizer-stage-S"); a stage restores its part and its own optimizer state from them.
// Evaluation runs forward through the first replica's stages, and stage 0 gets the outputs.
#include <chrono>
#include <sstream>

#include "steppers.h"
#include "yard/actors/ddp.h"
#include "yard/actors/pipeline.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"
#include "yard/collective_torch.h"
#include "yard/railway/shards.h"

namespace railway_train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kSplitBlob = "pipeline-split";  // "1 2 1": the encoder layers of each stage
namespace coll = yard::collective;

// The tensors of named parameters.
std::vector<torch::Tensor> tensors_of(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<torch::Tensor> out;
  for (auto& [n, t] : named) out.push_back(t);
  return out;
}

class Pipeline final : public Stepper {
 public:
  Pipeline(const TrainConfig& cfg, const Layout& at, const std::string& generation, int64_t steps_per_epoch,
           const ModelMaker& make)
      : cfg_(cfg), at_(at), make_(make) {
    const std::string job = "railway-pipe-" + generation;
    // Joined in one order by every trainer: the stage's replicas, the replica's stages, the links.
    if (at.replicas > 1)
      replicas_ = coll::create_group(coll::cluster_group(job + "-stage" + std::to_string(at.stage), at.replicas, at.replica, generation));
    stages_ = coll::create_group(coll::cluster_group(job + "-replica" + std::to_string(at.replica), at.stages, at.stage, generation));
    plan(steps_per_epoch);
    if (replicas_) overlap_across_replicas();
    stage_ = std::make_unique<yard::actors::PipelineStage>(
        at.stage, at.stages,
        yard::actors::PipelineLinks::join(coll::cluster_group(job + "-links" + std::to_string(at.replica), at.stages, at.stage, generation),
                                          at.stage, at.stages));
  }

  void begin(const std::optional<yard::actors::CheckpointData>& from) override {
    if (!from) {
      // The replicas of a stage start identical (every trainer seeds the same; made sure).
      if (replicas_) broadcast_part(*replicas_, 0);
      return;
    }
    auto it = from->blobs.find("optimizer-stage-" + std::to_string(at_.stage));
    if (it == from->blobs.end())
      throw std::runtime_error("the checkpoint of step " + std::to_string(from->step) + " holds no optimizer state for pipeline stage " +
                               std::to_string(at_.stage) + " (was it written by a job with another strategy or split?)");
    yard::actors::load_state(*opt_, it->second);
    step_ = static_cast<int64_t>(from->step);
  }

  double step(const StepBatches& b) override {
    for (auto& p : params_) p.mutable_grad().reset();
    int64_t local = 0;
    for (auto n : b.sizes) local += n;
    double loss_sum = 0;
    size_t last_batch = 0;
    for (size_t i = 0; i < b.sizes.size(); ++i)
      if (b.sizes[i] > 0) last_batch = i;
    bool begun = false;
    for (size_t i = 0; i < b.sizes.size(); ++i) {
      if (b.sizes[i] == 0) continue;
      auto sizes = yard::actors::micro_batch_sizes(b.sizes[i], static_cast<int>(std::min<int64_t>(cfg_.micro_batches, b.sizes[i])));
      std::vector<int64_t> first{0};
      for (auto n : sizes) first.push_back(first.back() + n);
      torch::Tensor x = stage_->first() ? b.input_of(i) : torch::Tensor();
      yard::actors::StageWork w;
      w.input = [&](int m) { return x.narrow(0, first[size_t(m)], sizes[size_t(m)]); };
      w.input_shape = [&](int m) { return std::vector<int64_t>{tokens_, sizes[size_t(m)], cfg_.d_model}; };
      w.forward = [&](const torch::Tensor& h) {
        return net_->layers(stage_->first() ? net_->embed(h) : h, span_.first, span_.end);
      };
      w.loss = [&](int m, const torch::Tensor& h) {
        return b.loss_on(i, first[size_t(m)], sizes[size_t(m)], net_->heads(h)) * (double(b.sizes[i]) / double(local));
      };
      // Hybrid: the step's last backward all-reduces its gradients across the stage's replicas as
      // backward produces them (bucket by bucket, as DDP does).
      if (ddp_ && i == last_batch)
        w.before_backward = [&, last = static_cast<int>(sizes.size()) - 1](int m) {
          if (m == last) ddp_->begin_step(local), begun = true;
        };
      loss_sum += stage_->train(static_cast<int>(sizes.size()), w) * double(local);
    }
    if (ddp_) {
      if (!begun) ddp_->begin_step(0);  // no sample here this step: zeros, so that the others complete
      ddp_->finish_step();
    }
    if (cfg_.clip > 0) clip();
    lr_ = schedule_.at(step_);
    for (auto& g : opt_->param_groups()) g.options().set_lr(lr_);
    opt_->step();
    ++step_;
    return stage_->last() ? loss_sum : 0;
  }
  bool reports_loss() const override { return stage_->last(); }

  double last_lr() const override { return lr_; }
  int64_t global_step() const override { return step_; }

  // Before a checkpoint: every stage of the first replica hands its part and its optimizer state
  // to stage 0 (rank 0, which writes checkpoints), as bytes.
  void synchronize() override {
    if (at_.replica != 0) return;
    auto mine = yard::actors::named_bytes(net_->part_parameters(span_.first, span_.end, stage_->first(), stage_->last()));
    auto parts = to_stage0(mine);
    auto states = to_stage0(yard::actors::StateSnapshot(*opt_).bytes());
    if (at_.stage != 0) return;
    yard::actors::NamedTensors whole;
    for (auto& p : parts) {
      auto named = yard::actors::from_named_bytes(p);
      whole.insert(whole.end(), named.begin(), named.end());
    }
    whole_model_ = std::move(whole);
    optimizer_states_ = std::move(states);
  }

  std::function<void(yard::actors::CheckpointData&)> checkpoint_parts() override {
    std::string split;
    for (int n : stage_layers()) split += (split.empty() ? "" : " ") + std::to_string(n);
    return [states = optimizer_states_, whole = whole_model_, split](yard::actors::CheckpointData& c) {
      c.blobs["model"] = yard::actors::module_state_bytes(whole);  // the stages' parts, as one model
      c.blobs[kSplitBlob] = split;
      for (size_t s = 0; s < states.size(); ++s) c.blobs["optimizer-stage-" + std::to_string(s)] = states[s];
    };
  }
  RailwayNet own_model() const override { return net_; }
  std::optional<RailwayOut> outputs(const torch::Tensor& x) override { return infer(x); }
  std::string schedule_note() const override { return note_of(cfg_, schedule_); }
  std::vector<int> stage_layers() const override {
    std::vector<int> layers;
    for (auto& s : spans_) layers.push_back(s.size());
    return layers;
  }
  void finish() override {
    stage_->destroy();
    stages_->destroy();
    if (replicas_) replicas_->destroy();
  }

 private:
  // The split (the checkpoint's when resuming one, else planned from measured times), then this
  // stage's part of the model and its optimizer.
  void plan(int64_t steps_per_epoch) {
    spans_ = kept_split();
    if (spans_.empty()) spans_ = measured_split();
    span_ = spans_[size_t(at_.stage)];
    net_ = make_(cfg_.layers, span_.first, span_.end);
    tokens_ = net_->pos.size(0);
    const bool first = at_.stage == 0, last = at_.stage == at_.stages - 1;
    params_ = tensors_of(net_->part_parameters(span_.first, span_.end, first, last));
    yard::actors::TrainerOptions to;
    to.optimizer = cfg_.optimizer;
    to.weight_decay = cfg_.weight_decay;
    to.schedule = schedule_ = schedule_of(cfg_, cfg_.batch * at_.replicas * cfg_.accumulate, cfg_.epochs * steps_per_epoch,
                                          cfg_.warmup_steps);
    opt_ = yard::actors::make_optimizer(params_, to);
  }

  // The split of the checkpoint the group resumed from, so that every stage's optimizer state
  // fits its part again (empty when there is none, or it is not a split of this pipeline).
  std::vector<yard::actors::StageSpan> kept_split() const {
    const auto& k = cfg_.stage_split;
    if (static_cast<int>(k.size()) != at_.stages) return {};
    std::vector<yard::actors::StageSpan> spans;
    int at = 0;
    for (int n : k) {
      if (n < 1) return {};
      spans.push_back({at, at + n});
      at += n;
    }
    if (at != cfg_.layers) return {};
    return spans;
  }

  // The split: every stage measures, on a one-layer model and a micro-batch, the forward and
  // backward of a layer alone, with the embedding before it and with the heads after it (the
  // encoder's layers are alike: the first layer's cost is the second, the last's the third); the
  // stages average their measurements so that all hold the same figures, and the same pure plan
  // follows on each.
  std::vector<yard::actors::StageSpan> measured_split() {
    const int layers = static_cast<int>(cfg_.layers);
    auto one = make_(1, 0, 1);
    const int64_t tokens = one->pos.size(0);
    std::vector<double> cost(size_t(layers), 0.0);
    {
      int64_t n = std::max<int64_t>(1, cfg_.batch / std::max<int64_t>(1, cfg_.micro_batches));
      auto x = torch::full({n, tokens, yard::railway::kFeatures}, 0.5f);
      double with_embed = 0, alone = 0, with_heads = 0;
      for (int rep = 0; rep < 3; ++rep) {
        auto timed = [&](bool embed, bool heads) {
          auto t0 = Clock::now();
          auto h = embed ? one->embed(x) : torch::full({tokens, n, cfg_.d_model}, 0.5f, torch::requires_grad());
          h = one->layers(h, 0, 1);
          if (heads) {
            auto out = one->heads(h);
            (out.cls.sum() + out.tokens.sum()).backward();
          } else {
            h.sum().backward();
          }
          return rep > 0 ? std::chrono::duration<double>(Clock::now() - t0).count() : 0.0;
        };
        with_embed += timed(true, false), alone += timed(false, false), with_heads += timed(false, true);
      }
      for (int i = 0; i < layers; ++i) cost[size_t(i)] = alone;
      cost.front() += with_embed - alone;
      cost.back() += with_heads - alone;
    }
    auto measured = torch::tensor(cost, torch::kDouble);
    coll::allreduce(*stages_, measured, coll::ReduceOp::kAvg);
    std::vector<double> avg(measured.data_ptr<double>(), measured.data_ptr<double>() + layers);
    return yard::actors::plan_stages(avg, at_.stages);
  }

  // Bytes from every stage to stage 0, in stage order there (empty elsewhere).
  std::vector<std::string> to_stage0(const std::string& mine) {
    std::vector<int64_t> lengths(size_t(at_.stages));
    int64_t n = static_cast<int64_t>(mine.size());
    stages_->allgather(&n, lengths.data(), 1, coll::DType::kInt64);
    std::vector<std::string> out(size_t(at_.stages));
    for (int s = 0; s < at_.stages; ++s) {
      auto& blob = out[size_t(s)];
      blob = s == at_.stage ? mine : std::string(size_t(lengths[size_t(s)]), '\0');
      stages_->broadcast(blob.data(), blob.size(), coll::DType::kUInt8, s);
    }
    if (at_.stage != 0) out.clear();
    return out;
  }

  // The model's outputs on x through the first replica's stages, in micro-batches of the step's
  // size; stage 0 gets them (from the last stage), the others return nullopt.
  std::optional<RailwayOut> infer(const torch::Tensor& x) {
    if (at_.replica != 0) return std::nullopt;
    const int64_t n = x.size(0), micro = std::max<int64_t>(1, cfg_.batch);  // no gradients kept: a batch each
    std::vector<int64_t> first{0}, sizes;
    for (int64_t at = 0; at < n; at += micro) sizes.push_back(std::min(micro, n - at)), first.push_back(at + sizes.back());
    yard::actors::StageWork w;
    w.input = [&](int m) { return x.narrow(0, first[size_t(m)], sizes[size_t(m)]); };
    w.input_shape = [&](int m) { return std::vector<int64_t>{tokens_, sizes[size_t(m)], cfg_.d_model}; };
    w.forward = [&](const torch::Tensor& h) {
      return net_->layers(stage_->first() ? net_->embed(h) : h, span_.first, span_.end);
    };
    auto cls = torch::zeros({n, 5}), amp = torch::zeros({n});
    if (n == 0) return at_.stage == 0 ? std::optional<RailwayOut>(RailwayOut{cls, {}, amp}) : std::nullopt;
    stage_->infer(static_cast<int>(sizes.size()), w, [&](int m, const torch::Tensor& h) {
        auto out = net_->heads(h);
        cls.narrow(0, first[size_t(m)], sizes[size_t(m)]).copy_(out.cls);
        amp.narrow(0, first[size_t(m)], sizes[size_t(m)]).copy_(out.amp);
      });
    coll::broadcast(*stages_, cls, at_.stages - 1);
    coll::broadcast(*stages_, amp, at_.stages - 1);
    if (at_.stage != 0) return std::nullopt;
    RailwayOut out;
    out.cls = cls;
    out.amp = amp;
    return out;
  }

  // This stage's parameters from replica `root` to the stage's other replicas, as one flat buffer.
  void broadcast_part(coll::Communicator& c, int root) {
    auto named = net_->part_parameters(span_.first, span_.end, stage_->first(), stage_->last());
    torch::NoGradGuard ng;
    std::vector<torch::Tensor> flat;
    for (auto& [n, t] : named) flat.push_back(t.reshape({-1}));
    auto buf = torch::cat(flat);
    coll::broadcast(c, buf, root);
    int64_t at = 0;
    for (auto& [n, t] : named) t.copy_(buf.narrow(0, at, t.numel()).view_as(t)), at += t.numel();
  }

  // The mean gradient over the replicas of this stage, each weighted by its samples: DDP over the
  // stage's own parameters (buckets of about a quarter of them, so that the first all-reduces run
  // while the last backward goes on).
  void overlap_across_replicas() {
    auto own = std::make_shared<torch::nn::Module>();
    int64_t bytes = 0;
    for (size_t k = 0; k < params_.size(); ++k)
      own->register_parameter("p" + std::to_string(k), params_[k]), bytes += params_[k].numel() * params_[k].element_size();
    yard::actors::DdpOptions o;
    o.bucket_bytes = static_cast<size_t>(std::max<int64_t>(64 << 10, bytes / 4));
    ddp_ = std::make_unique<yard::actors::DistributedDataParallel>(own, *replicas_, o);
  }

  // The gradient's norm over every stage's part; each stage scales its own.
  void clip() {
    double sq = 0;
    for (auto& p : params_)
      if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
    auto t = torch::tensor({sq}, torch::kDouble);
    coll::allreduce(*stages_, t, coll::ReduceOp::kSum);
    double norm = std::sqrt(t.item<double>()), scale = cfg_.clip / (norm + 1e-6);
    if (scale < 1)
      for (auto& p : params_)
        if (p.grad().defined()) p.grad().mul_(scale);
  }

  TrainConfig cfg_;
  Layout at_;
  ModelMaker make_;
  RailwayNet net_{nullptr};  // this stage's part
  std::unique_ptr<coll::Communicator> replicas_, stages_;
  std::unique_ptr<yard::actors::PipelineStage> stage_;
  std::unique_ptr<yard::actors::DistributedDataParallel> ddp_;  // hybrid: across the stage's replicas
  std::vector<yard::actors::StageSpan> spans_;  // every stage's layers
  yard::actors::StageSpan span_;                 // this stage's
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  yard::actors::LrSchedule schedule_;
  std::vector<std::string> optimizer_states_;  // stage 0 of the first replica: every stage's, at the last synchronize()
  yard::actors::NamedTensors whole_model_;       // and every stage's part
  int64_t tokens_ = 0, step_ = 0;
  double lr_ = 0;
};

}  // namespace

std::vector<int> pipeline_split_of(const yard::actors::CheckpointData& c) {
  std::vector<int> out;
  auto it = c.blobs.find(kSplitBlob);
  if (it == c.blobs.end()) return out;
  std::istringstream in(it->second);
  for (int n; in >> n;) out.push_back(n);
  return out;
}

std::unique_ptr<Stepper> make_pipeline_stepper(const TrainConfig& cfg, const Layout& at, const std::string& generation,
                                               int64_t steps_per_epoch, const ModelMaker& make) {
  return std::make_unique<Pipeline>(cfg, at, generation, steps_per_epoch, make);
}

}  // namespace railway_train
