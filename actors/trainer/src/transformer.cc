#include "yard/actors/transformer.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_kernel.h"

namespace yard::nn {

namespace {

detail::AttentionShape shape_of(const torch::Tensor& qkv, int64_t heads) {
  detail::AttentionShape s;
  s.tokens = qkv.size(0);
  s.batch = qkv.size(1);
  s.heads = heads;
  s.head_dim = qkv.size(2) / 3 / heads;
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return s;
}

struct SelfAttention : torch::autograd::Function<SelfAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t heads) {
    auto qkv = qkv_in.contiguous();
    auto s = shape_of(qkv, heads);
    auto probs = torch::empty({s.batch * heads, s.tokens, s.tokens}, qkv.options());
    auto out = torch::empty({s.tokens, s.batch, heads * s.head_dim}, qkv.options());
    const float* in = qkv.data_ptr<float>();
    float *p = probs.data_ptr<float>(), *o = out.data_ptr<float>();
    at::parallel_for(0, s.batch * heads, 1, [&](int64_t b0, int64_t b1) { detail::attention_forward(s, b0, b1, in, p, o); });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& probs = saved[1];
    auto s = shape_of(qkv, ctx->saved_data["heads"].toInt());
    auto dout = grads[0].contiguous();
    auto dqkv = torch::empty_like(qkv);
    const float *in = qkv.data_ptr<float>(), *p = probs.data_ptr<float>(), *d = dout.data_ptr<float>();
    float* dq = dqkv.data_ptr<float>();
    at::parallel_for(0, s.batch * s.heads, 1,
                     [&](int64_t b0, int64_t b1) { detail::attention_backward(s, b0, b1, in, p, d, dq); });
    return {dqkv, torch::Tensor()};
  }
};

// The maximum of each column of x (rows × cols) over rows [first, end) and over all rows, with the
// first row holding each (a NaN counts as the maximum, as in max(dim)): one pass over x.
void span_and_all_argmax(const float* x, int64_t rows, int64_t cols, int64_t first, int64_t end, float* span_max,
                         int32_t* span_at, float* all_max, int32_t* all_at) {
  auto better = [](float v, float m) { return v > m || (v != v && m == m); };
  auto take = [cols](const float* row, int32_t t, float* mx, int32_t* at) {
    for (int64_t j = 0; j < cols; ++j) mx[j] = row[j], at[j] = t;
  };
  auto update = [&](const float* row, int32_t t, float* mx, int32_t* at) {
    for (int64_t j = 0; j < cols; ++j)
      if (better(row[j], mx[j])) mx[j] = row[j], at[j] = t;
  };
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = x + t * cols;
    auto t32 = static_cast<int32_t>(t);
    if (t == 0)
      take(row, t32, all_max, all_at);
    else
      update(row, t32, all_max, all_at);
    if (t == first)
      take(row, t32, span_max, span_at);
    else if (t > first && t < end)
      update(row, t32, span_max, span_at);
  }
}

// The gradient of a max over dim 0: each column's g goes to the row that held the maximum.
void add_max_grad(const int32_t* at, int64_t cols, const float* g, float* out) {
  for (int64_t j = 0; j < cols; ++j) out[at[j] * cols + j] += g[j];
}

struct SpanAndAllMax : torch::autograd::Function<SpanAndAllMax> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                                              int64_t first, int64_t end) {
    auto x = x_in.contiguous();
    int64_t rows = x.size(0), cols = x.numel() / std::max<int64_t>(1, rows);
    auto out_shape = x.sizes().slice(1);
    auto span = torch::empty(out_shape, x.options()), all = torch::empty(out_shape, x.options());
    auto at = torch::empty({2, cols}, x.options().dtype(torch::kInt));
    int32_t* ap = at.data_ptr<int32_t>();
    span_and_all_argmax(x.data_ptr<float>(), rows, cols, first, end, span.data_ptr<float>(), ap, all.data_ptr<float>(),
                        ap + cols);
    ctx->save_for_backward({at});
    ctx->saved_data["sizes"] = x.sizes();
    return {span, all};
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    auto at = ctx->get_saved_variables()[0];
    auto dx = torch::zeros(ctx->saved_data["sizes"].toIntVector(), grads[0].defined() ? grads[0].options() : grads[1].options());
    int64_t cols = at.size(1);
    const int32_t* ap = at.data_ptr<int32_t>();
    for (int i = 0; i < 2; ++i)
      if (grads[i].defined()) {
        auto g = grads[i].contiguous();
        add_max_grad(ap + i * cols, cols, g.data_ptr<float>(), dx.data_ptr<float>());
      }
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> span_and_all_max(const torch::Tensor& x, int64_t first, int64_t end) {
  TORCH_CHECK(x.dim() >= 1 && x.scalar_type() == torch::kFloat && x.device().is_cpu(),
              "span_and_all_max: x must be a float32 CPU tensor, got ", x.sizes(), " ", x.dtype());
  TORCH_CHECK(0 <= first && first < end && end <= x.size(0), "span_and_all_max: rows [", first, ", ", end,
              ") of ", x.size(0));
  auto out = SpanAndAllMax::apply(x, first, end);
  return {out[0], out[1]};
}

torch::Tensor self_attention(const torch::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.scalar_type() == torch::kFloat && qkv.device().is_cpu(),
              "self_attention: qkv must be a (T, N, 3E) float32 CPU tensor, got ", qkv.sizes(), " ", qkv.dtype());
  TORCH_CHECK(heads > 0 && qkv.size(2) % (3 * heads) == 0, "self_attention: 3E = ", qkv.size(2),
              " is not a multiple of 3 x heads (", heads, ")");
  return SelfAttention::apply(qkv, heads);
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t d, int64_t h, int64_t ff) : d_model(d), heads(h) {
  TORCH_CHECK(d % h == 0, "TransformerEncoderLayer: d_model ", d, " is not a multiple of heads ", h);
  self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
  // Initialised as LibTorch's MultiheadAttention: Xavier-uniform projections, zero biases.
  in_proj_weight = self_attn->register_parameter("in_proj_weight", torch::empty({3 * d, d}));
  in_proj_bias = self_attn->register_parameter("in_proj_bias", torch::zeros({3 * d}));
  torch::nn::init::xavier_uniform_(in_proj_weight);
  out_proj = self_attn->register_module("out_proj", torch::nn::Linear(d, d));
  torch::nn::init::zeros_(out_proj->bias);
  linear1 = register_module("linear1", torch::nn::Linear(d, ff));
  linear2 = register_module("linear2", torch::nn::Linear(ff, d));
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
}

torch::Tensor TransformerEncoderLayerImpl::forward(const torch::Tensor& x) {
  auto qkv = torch::nn::functional::linear(x, in_proj_weight, in_proj_bias);  // (T, N, 3E)
  auto a = out_proj->forward(self_attention(qkv, heads));
  auto h = norm1->forward(x + a);
  return norm2->forward(h + linear2->forward(torch::relu(linear1->forward(h))));
}

TransformerEncoderImpl::TransformerEncoderImpl(int64_t d, int64_t h, int64_t ff, int64_t n, int64_t keep_first, int64_t keep_end) {
  if (keep_end < 0) keep_end = n;
  if (keep_first < 0 || keep_first > keep_end || keep_end > n)
    throw std::invalid_argument("encoder layers [" + std::to_string(keep_first) + ", " + std::to_string(keep_end) +
                                ") of " + std::to_string(n));
  whole = keep_first == 0 && keep_end == n;
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    TransformerEncoderLayer layer(d, h, ff);  // drawn in any case: the kept layers' values follow
    if (i >= keep_first && i < keep_end)
      layers->push_back(layer);
    else
      layers->push_back(torch::nn::Identity());
  }
}

torch::Tensor TransformerEncoderImpl::forward(torch::Tensor x) {
  if (!whole) throw std::logic_error("the forward of an encoder built as a part: run its own layers");
  for (auto& l : *layers) x = l->as<TransformerEncoderLayer>()->forward(x);
  return x;
}

}  // namespace yard::nn
