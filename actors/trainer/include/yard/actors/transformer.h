// A Transformer encoder for training on CPUs: the same function and parameters as LibTorch's
// nn::TransformerEncoderLayer (post-norm, ReLU feed-forward, no dropout), with the attention
// fused per (batch, head) block (scores kept in cache, q/k/v read in place from the input
// projection, no transposes, no head-averaged weights computed for nobody).
//
// Parameter names match LibTorch's layer (self_attn.in_proj_weight, self_attn.out_proj.*,
// linear1.*, linear2.*, norm1.*, norm2.*), so weights move between the two by name.
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

namespace yard::nn {

// softmax(scale · q kᵀ) v for every (batch, head), as an autograd function. qkv: (T, N, 3E), the
// input projection's output (q, k, v side by side); returns (T, N, E). float32 on the CPU.
torch::Tensor self_attention(const torch::Tensor& qkv, int64_t heads);

// The maximum over dim 0 of x (T, ...) rows [first, end) and of all rows, as one autograd
// function: {span max, whole max}, each x.shape[1:]. The same values as x.max(0), and the same
// gradient (to the first row holding the maximum), without the index tensors LibTorch's max(dim)
// keeps and scatters back (about 6 ms for a (128, 64, 64) float32 tensor, this ~1 ms). float32 CPU.
std::pair<torch::Tensor, torch::Tensor> span_and_all_max(const torch::Tensor& x, int64_t first, int64_t end);

struct TransformerEncoderLayerImpl : torch::nn::Module {
  TransformerEncoderLayerImpl(int64_t d_model, int64_t heads, int64_t dim_feedforward);
  // x: (T, N, E) -> (T, N, E)
  torch::Tensor forward(const torch::Tensor& x);

  int64_t d_model, heads;
  std::shared_ptr<torch::nn::Module> self_attn;  // holds in_proj_weight, in_proj_bias, out_proj
  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr}, linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

// `layers` encoder layers, each initialised independently. Given [keep_first, keep_end), only
// those layers are kept (a pipeline stage's part): every other one is drawn from the random
// generator as the whole encoder draws it, so that the kept ones start as the whole encoder's, and
// then left as an empty placeholder, so that every layer keeps its name (layers.i) and a part
// loads from the whole encoder's saved state.
struct TransformerEncoderImpl : torch::nn::Module {
  TransformerEncoderImpl(int64_t d_model, int64_t heads, int64_t dim_feedforward, int64_t layers, int64_t keep_first = 0,
                         int64_t keep_end = -1);
  // The whole encoder's forward (a part runs its layers through layers[i] itself).
  torch::Tensor forward(torch::Tensor x);
  torch::nn::ModuleList layers{nullptr};
  bool whole = true;
};
TORCH_MODULE(TransformerEncoder);

}  // namespace yard::nn
