// What the training job reports to Prometheus through yard/metrics.h (exported by the driver's
// node): per chunk of steps the loss, the step time and samples/s, the checkpoint hand-over on
// the training thread; per epoch the validation loss and macro-F1. Tagged with the run's id.
#pragma once

#include <string>

#include "yard/metrics.h"

namespace yard::railway {

class TrainMetrics {
 public:
  explicit TrainMetrics(std::string run) : tags_{{"run", std::move(run)}} {}
  void chunk(double loss, double seconds, long steps, double samples_per_s, double checkpoint_ms) {
    loss_.set(loss, tags_);
    if (steps > 0) step_.observe(seconds / double(steps), tags_);
    sps_.set(samples_per_s, tags_);
    steps_.inc(double(steps), tags_);
    if (checkpoint_ms > 0) ckpt_.set(checkpoint_ms / 1000, tags_);
  }
  void epoch(double val_loss, double f1, long epoch) {
    val_loss_.set(val_loss, tags_);
    f1_.set(f1, tags_);
    epoch_.set(double(epoch), tags_);
  }
  void recovery(const std::string& phase) { recoveries_.inc(1, {{"run", tags_.at("run")}, {"phase", phase}}); }
  // An elastic group's size changed.
  void resize(int world) {
    world_.set(double(world), tags_);
    resizes_.inc(1, tags_);
  }

 private:
  yard::metrics::Tags tags_;
  yard::metrics::Gauge loss_{"railway_train_loss", "mean training loss of the last chunk of steps", {"run"}};
  yard::metrics::Histogram step_{"railway_step_seconds", "time per training step (the slowest rank)",
                                 {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}, {"run"}};
  yard::metrics::Gauge sps_{"railway_samples_per_second", "training samples per second, all ranks", {"run"}};
  yard::metrics::Counter steps_{"railway_steps_total", "training steps done", {"run"}};
  yard::metrics::Gauge ckpt_{"railway_checkpoint_handover_seconds",
                             "the last checkpoint's hand-over on the training thread", {"run"}};
  yard::metrics::Gauge val_loss_{"railway_validation_loss", "validation loss after the last epoch", {"run"}};
  yard::metrics::Gauge f1_{"railway_validation_macro_f1", "validation macro-F1 after the last epoch", {"run"}};
  yard::metrics::Gauge epoch_{"railway_epoch", "epochs finished", {"run"}};
  yard::metrics::Gauge world_{"railway_trainers", "trainers in the (elastic) group", {"run"}};
  yard::metrics::Counter resizes_{"railway_resizes_total", "elastic group size changes", {"run"}};
  yard::metrics::Counter recoveries_{"railway_recoveries_total", "processes of the job lost and their work done again",
                                     {"run", "phase"}};
};

}  // namespace yard::railway
