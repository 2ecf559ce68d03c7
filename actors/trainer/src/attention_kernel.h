// Fused multi-head self-attention on the CPU, one (batch, head) block at a time, so a block's
// T×T scores stay in cache from the product that makes them through the softmax to the product
// that uses them (the unfused path writes and rereads the whole (N·H, T, T) tensor at each step).
// q, k and v are read in place from the input projection's output, and the result is written in
// the layout the output projection takes: no transposes or copies around it.
#pragma once

#include <cstdint>

namespace yard::nn::detail {

struct AttentionShape {
  int64_t tokens = 0, batch = 0, heads = 0, head_dim = 0;
  float scale = 1;  // applied to q·kᵀ (1/sqrt(head_dim))
};

// qkv: (T, N, 3E) with E = heads·head_dim; probs: (N·H, T, T), filled; out: (T, N, E).
// Blocks [b0, b1) of the N·H.
void attention_forward(const AttentionShape& s, int64_t b0, int64_t b1, const float* qkv, float* probs, float* out);
// dout: (T, N, E); dqkv: (T, N, 3E), every element of blocks [b0, b1) written.
void attention_backward(const AttentionShape& s, int64_t b0, int64_t b1, const float* qkv, const float* probs,
                        const float* dout, float* dqkv);

}  // namespace yard::nn::detail
