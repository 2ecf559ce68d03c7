#include "yard/actors/pipeline.h"

#include <string>

#include "yard/collective_torch.h"

namespace yard::actors {

using collective::CollectiveError;
using collective::Communicator;
using collective::WorkPtr;

namespace {

// Group ranks: the lower stage of a boundary is rank 0, the upper rank 1.
constexpr int kLower = 0, kUpper = 1;

std::unique_ptr<Communicator> join_link(collective::GroupSpec spec, const char* kind, int boundary, int rank) {
  spec.name.append("/").append(kind).append("/").append(std::to_string(boundary));
  spec.world_size = 2;
  spec.rank = rank;
  return collective::create_group(spec);
}

}  // namespace

PipelineLinks PipelineLinks::join(const collective::GroupSpec& base, int stage, int stages) {
  if (stages < 1 || stage < 0 || stage >= stages)
    throw PipelineError("stage " + std::to_string(stage) + " of a pipeline of " + std::to_string(stages) + " stages");
  // Every stage joins its lower boundary before its upper one, activations before gradients: the
  // chain of blocking joins always has a partner waiting.
  PipelineLinks l;
  if (stage > 0) l.act_in = join_link(base, "act", stage - 1, kUpper);
  if (stage + 1 < stages) l.act_out = join_link(base, "act", stage, kLower);
  if (stage > 0) l.grad_out = join_link(base, "grad", stage - 1, kUpper);
  if (stage + 1 < stages) l.grad_in = join_link(base, "grad", stage, kLower);
  return l;
}

void PipelineLinks::destroy() {
  for (auto* c : {&act_in, &act_out, &grad_in, &grad_out})
    if (*c) (*c)->destroy(), c->reset();
}

PipelineStage::PipelineStage(int stage, int stages, PipelineLinks links, std::chrono::milliseconds timeout)
    : stage_(stage), stages_(stages), links_(std::move(links)), timeout_(timeout) {
  if ((stage > 0) != (links_.act_in != nullptr) || (stage + 1 < stages) != (links_.act_out != nullptr))
    throw PipelineError("pipeline stage " + std::to_string(stage) + " of " + std::to_string(stages) +
                        ": its links do not match its place in the pipeline");
}

PipelineStage::~PipelineStage() = default;

void PipelineStage::destroy() { links_.destroy(); }

namespace {

// Receives of activations run this many micro-batches ahead of the compute that needs them.
constexpr int kReceiveAhead = 2;

// One step's traffic of a stage: receives posted ahead on the links' own threads, sends left to
// finish in the background until the end of the step.
class Traffic {
 public:
  Traffic(int stage, int micro_batches, std::chrono::milliseconds timeout)
      : stage_(stage), in_(size_t(micro_batches)), in_work_(size_t(micro_batches)), timeout_(timeout) {}

  // Micro-batch m's activation from the previous stage; the receives of the next kReceiveAhead
  // are posted before waiting for it.
  torch::Tensor activation(Communicator& link, int m, const StageWork& w) {
    for (int k = m; k <= m + kReceiveAhead && k < static_cast<int>(in_.size()); ++k)
      if (!in_work_[size_t(k)]) {
        in_[size_t(k)] = torch::empty(w.input_shape(k));
        in_work_[size_t(k)] = receive(link, in_[size_t(k)], kLower);
      }
    finish(in_work_[size_t(m)], "receiving the activation of micro-batch " + std::to_string(m) + " from stage " +
                                    std::to_string(stage_ - 1));
    return std::exchange(in_[size_t(m)], torch::Tensor());
  }
  WorkPtr receive(Communicator& link, torch::Tensor t, int peer) {
    collective::Options o{timeout_, 0};
    return link.async([t, peer, o](Communicator& c) mutable { collective::recv(c, t, peer, o); });
  }
  void send(Communicator& link, torch::Tensor t, int peer, std::string what) {
    collective::Options o{timeout_, 0};
    sends_.emplace_back(link.async([t = t.contiguous(), peer, o](Communicator& c) { collective::send(c, t, peer, o); }),
                        std::move(what));
  }
  // Waits for a transfer; its failure is rethrown naming this stage and what it was doing.
  void finish(const WorkPtr& w, const std::string& what) {
    auto t0 = std::chrono::steady_clock::now();
    struct Count {
      std::chrono::steady_clock::time_point t0;
      double& waited;
      ~Count() { waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    } count{t0, waited_};
    try {
      if (!w->wait(timeout_ + std::chrono::seconds(5)))
        throw CollectiveError("no answer within " + std::to_string(timeout_.count()) + " ms");
    } catch (const std::exception& e) {
      throw CollectiveError("pipeline stage " + std::to_string(stage_) + ": " + what + ": " + e.what());
    }
  }
  void finish_sends() {
    for (auto& [w, what] : sends_) finish(w, what);
    sends_.clear();
  }
  double waited() const { return waited_; }

 private:
  int stage_;
  std::vector<torch::Tensor> in_;
  std::vector<WorkPtr> in_work_;
  std::vector<std::pair<WorkPtr, std::string>> sends_;
  std::chrono::milliseconds timeout_;
  double waited_ = 0;
};

}  // namespace

double PipelineStage::train(int micro_batches, const StageWork& w) {
  Traffic t(stage_, micro_batches, timeout_);
  const size_t M = size_t(micro_batches);
  std::vector<torch::Tensor> inputs(M), outputs(M), grads(M);
  std::vector<WorkPtr> grad_work(M);
  double loss_sum = 0;
  const std::string next = " stage " + std::to_string(stage_ + 1), prev = " stage " + std::to_string(stage_ - 1);
  for (const auto& s : one_f_one_b(stage_, stages_, micro_batches)) {
    const size_t m = size_t(s.micro);
    const std::string mb = "micro-batch " + std::to_string(s.micro);
    if (s.op == PipeOp::kForward) {
      torch::Tensor x;
      if (first()) {
        x = w.input(s.micro);
      } else {
        x = t.activation(*links_.act_in, s.micro, w).requires_grad_(true);
        inputs[m] = x;
      }
      auto y = w.forward(x);
      if (last()) {
        outputs[m] = w.loss(s.micro, y);
        loss_sum += outputs[m].item<double>();
      } else {
        outputs[m] = y.contiguous();
        grads[m] = torch::empty_like(outputs[m]);
        grad_work[m] = t.receive(*links_.grad_in, grads[m], kUpper);
        t.send(*links_.act_out, outputs[m].detach(), kUpper, "sending the activation of " + mb + " to" + next);
      }
    } else {
      if (w.before_backward) w.before_backward(s.micro);
      if (last()) {
        outputs[m].backward();
      } else {
        t.finish(grad_work[m], "receiving the gradient of " + mb + " from" + next);
        torch::autograd::backward({outputs[m]}, {grads[m]});
      }
      outputs[m] = torch::Tensor(), grads[m] = torch::Tensor(), grad_work[m].reset();
      if (!first()) {
        auto g = inputs[m].grad();
        if (!g.defined()) g = torch::zeros_like(inputs[m]);  // this stage's output does not depend on its input
        t.send(*links_.grad_out, g, kLower, "sending the gradient of " + mb + " to" + prev);
        inputs[m] = torch::Tensor();
      }
    }
  }
  t.finish_sends();
  waited_ = t.waited();
  return loss_sum;
}

void PipelineStage::infer(int micro_batches, const StageWork& w,
                          const std::function<void(int, const torch::Tensor&)>& output) {
  torch::NoGradGuard no_grad;
  Traffic t(stage_, micro_batches, timeout_);
  for (int m = 0; m < micro_batches; ++m) {
    auto y = w.forward(first() ? w.input(m) : t.activation(*links_.act_in, m, w));
    if (last())
      output(m, y);
    else
      t.send(*links_.act_out, y, kUpper, "sending the activation of micro-batch " + std::to_string(m) + " to stage " +
                                             std::to_string(stage_ + 1));
  }
  t.finish_sends();
  waited_ = t.waited();
}

}  // namespace yard::actors
