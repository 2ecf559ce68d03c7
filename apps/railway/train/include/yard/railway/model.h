// The railway model: a Transformer encoder over the distance-domain tokens of a window, with two
// heads — the defect class of the window and its irregularity amplitude. The encoder is yard::nn's
// (LibTorch's TransformerEncoderLayer with a fused attention). (The benchmarks train the same
// model against PyTorch's.)
#pragma once

#include <torch/torch.h>

#include "yard/actors/transformer.h"

struct RailwayNetImpl : torch::nn::Module {
  RailwayNetImpl(int64_t features, int64_t tokens, int64_t d, int64_t layers, int64_t heads = 4)
      : input(register_module("input", torch::nn::Linear(features, d))),
        pos(register_parameter("pos", torch::randn({tokens, 1, d}) * 0.02)),
        encoder(register_module("encoder", yard::nn::TransformerEncoder(d, heads, 2 * d, layers))),
        cls(register_module("cls", torch::nn::Linear(d, 5))),
        amp(register_module("amp", torch::nn::Linear(d, 1))) {}
  // x: (N, T, F) -> class logits (N, 5), amplitude (N)
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto h = input->forward(x).transpose(0, 1) + pos;  // (T, N, d)
    h = encoder->forward(h);
    auto pooled = std::get<0>(h.max(0));                // (N, d): a defect is a local event
    return {cls->forward(pooled), amp->forward(pooled).squeeze(-1)};
  }
  torch::nn::Linear input;
  torch::Tensor pos;
  yard::nn::TransformerEncoder encoder;
  torch::nn::Linear cls, amp;
};
TORCH_MODULE(RailwayNet);

