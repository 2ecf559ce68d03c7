#include "yard/actors/trainer.h"

#include "yard/process.h"

namespace yard::actors {

void keep_freed_memory() { yard::sys::keep_freed_heap(); }

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> params, const TrainerOptions& o) {
  if (o.optimizer == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        std::move(params), torch::optim::AdamWOptions(o.schedule.base_lr).weight_decay(o.weight_decay));
  if (o.optimizer == "sgd")
    return std::make_unique<torch::optim::SGD>(
        std::move(params), torch::optim::SGDOptions(o.schedule.base_lr).momentum(o.momentum).weight_decay(o.weight_decay));
  throw std::invalid_argument("unknown optimizer '" + o.optimizer + "' (adamw or sgd)");
}

Trainer::Trainer(std::shared_ptr<torch::nn::Module> model, collective::Communicator* comm, TrainerOptions o)
    : model_(std::move(model)), o_(std::move(o)) {
  lr_sched_.base = o_.schedule;
  opt_ = make_optimizer(model_->parameters(), o_);
  if (comm && o_.sync_every > 0) {
    avg_ = std::make_unique<PeriodicAveraging>(model_, *comm, o_.sync_every);
    avg_->broadcast_state(0);
  } else if (comm) {
    ddp_ = std::make_unique<DistributedDataParallel>(model_, *comm, o_.ddp);
    ddp_->broadcast_state(0);
  }
}

Trainer::~Trainer() = default;

double Trainer::step(const std::vector<int64_t>& sizes, const std::function<torch::Tensor(size_t)>& loss_of) {
  if (sizes.empty()) throw std::invalid_argument("Trainer::step: no micro-batches");
  using Clock = std::chrono::steady_clock;
  auto from = busy_from_.value_or(Clock::now());
  busy_from_.reset();
  int64_t local = 0;
  for (auto n : sizes) local += n;
  // Gradients start undefined rather than zeroed (PyTorch's set_to_none): backward then hands
  // each parameter its gradient without a zeroing pass and an addition.
  for (auto& g : opt_->param_groups())
    for (auto& p : g.params()) p.mutable_grad().reset();
  double loss_sum = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bool last = i + 1 == sizes.size();
    if (ddp_) {
      // All but the last micro-batch only accumulate; the last one's backward all-reduces.
      ddp_->set_no_sync(!last);
      if (last) ddp_->begin_step(local, rate_);
    }
    if (sizes[i] == 0) continue;
    auto loss = loss_of(i);
    double n = static_cast<double>(sizes[i]);
    // Each micro-batch's mean loss weighted by its share of this rank's samples in the step.
    (sizes.size() == 1 ? loss : loss * (n / static_cast<double>(local))).backward();
    loss_sum += loss.item<double>() * n;
  }
  if (ddp_) ddp_->finish_step();
  auto reduced = Clock::now();
  if (o_.clip > 0) torch::nn::utils::clip_grad_norm_(model_->parameters(), o_.clip);
  lr_ = lr_sched_.at(step_);
  for (auto& g : opt_->param_groups()) g.options().set_lr(lr_);
  opt_->step();
  ++step_;
  busy_s_ = std::chrono::duration<double>(reduced - from).count() - last_wait_s() + tail_s_;
  tail_s_ = std::chrono::duration<double>(Clock::now() - reduced).count();
  rate_ = local > 0 && busy_s_ > 0 ? static_cast<double>(local) / busy_s_ : 0.0;
  if (avg_) avg_->step_done(local);
  return loss_sum;
}

void Trainer::synchronize() {
  if (avg_ && avg_->steps() % avg_->every() != 0) avg_->average();
}

}  // namespace yard::actors
