// The training parts from an installed Switchyard (switchyard-torch / Switchyard::torch): a
// LibTorch model trained by yard::actors::Trainer as a single replica, at the rates LrSchedule
// gives. Fits y = 2x + 1; prints the loss before and after, exits 0 when it fell below 1e-3.
#include <torch/torch.h>

#include <cstdio>

#include <yard/actors/trainer.h>

int main() {
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::LinearImpl>(1, 1);
  yard::actors::TrainerOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9;
  o.weight_decay = 0;
  o.schedule.base_lr = 0.05;
  o.schedule.warmup_steps = 5;
  yard::actors::Trainer trainer(model, nullptr, o);
  auto x = torch::linspace(-1, 1, 64).unsqueeze(1);
  auto y = 2 * x + 1;
  double first = 0, last = 0;
  for (int s = 0; s < 300; ++s) {
    last = trainer.step({64}, [&](size_t) { return torch::mse_loss(model->forward(x), y); }) / 64;
    if (s == 0) first = last;
  }
  std::printf("loss %.4f -> %.6f after %lld steps (lr %.3f)\n", first, last,
              static_cast<long long>(trainer.global_step()), trainer.last_lr());
  return last < 1e-3 ? 0 : 1;
}
