// A model's or an optimizer's state as bytes, for checkpoints (and back).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace yard::actors {

std::string state_bytes(const torch::nn::Module& m);
std::string state_bytes(const torch::optim::Optimizer& o);
void load_state(torch::nn::Module& m, const std::string& bytes);
void load_state(torch::optim::Optimizer& o, const std::string& bytes);

// Named tensors (by their dotted names in a module: "encoder.layers.3.linear1.weight").
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
// What Module::save writes for a module whose parameters are `named`: a whole model's state made
// from its parts (pipeline stages), loadable with load_state() into the whole model.
std::string module_state_bytes(const NamedTensors& named);
// Named tensors as bytes and back (a part as it travels). from_named_bytes throws
// std::runtime_error for bytes that are not such.
std::string named_bytes(const NamedTensors& named);
NamedTensors from_named_bytes(const std::string& bytes);

// A point-in-time copy of a model's or an optimizer's state, for checkpoints that do not stall
// training: taking one copies the tensors (parameters and buffers; AdamW, Adam or SGD moments),
// a memcpy of the state on the training thread; bytes() turns it into exactly what
// state_bytes() gave at that moment, and may run on another thread while training goes on.
// Optimizers of other kinds are serialised when the snapshot is taken. The model's copy mirrors
// Module::save (own parameters, buffers, then children): for modules that override save(), use
// state_bytes().
class StateSnapshot {
 public:
  StateSnapshot() = default;
  explicit StateSnapshot(const torch::nn::Module& m);
  explicit StateSnapshot(const torch::optim::Optimizer& o);
  std::string bytes() const;

  struct ModuleCopy;

 private:
  std::shared_ptr<const ModuleCopy> module_;
  std::shared_ptr<const torch::optim::Optimizer> optimizer_;
  std::string bytes_;  // optimizers of other kinds: serialised at once
};

}  // namespace yard::actors
