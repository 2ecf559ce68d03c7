// A model's or an optimizer's state as bytes, for checkpoints (and back).
#pragma once

#include <torch/torch.h>

#include <string>

namespace yard::actors {

std::string state_bytes(const torch::nn::Module& m);
std::string state_bytes(const torch::optim::Optimizer& o);
void load_state(torch::nn::Module& m, const std::string& bytes);
void load_state(torch::optim::Optimizer& o, const std::string& bytes);

}  // namespace yard::actors
