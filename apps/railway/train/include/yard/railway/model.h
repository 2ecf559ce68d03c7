// The railway model: a Transformer encoder over the distance-domain tokens of a window, with three
// heads — the defect class of the window's middle half (the part a detector reports from; the
// quarters either side are context), the class of every token (where in the window a defect is),
// and the window's irregularity amplitude. The encoder is yard::nn's (LibTorch's
// TransformerEncoderLayer with a fused attention). (The benchmarks train the same model against
// PyTorch's.)
#pragma once

#include <torch/torch.h>

#include "yard/actors/transformer.h"

struct RailwayOut {
  torch::Tensor cls;     // (N, 5): the window's middle half
  torch::Tensor tokens;  // (N, T, 5): every token
  torch::Tensor amp;     // (N): irregularity amplitude, mm
};

// Given [keep_first, keep_end), the model is built as a pipeline stage's part: only those encoder
// layers are kept (yard::nn::TransformerEncoder's placeholders stand for the others), starting as
// the whole model's do under the same seed; the embedding and the heads, small, are always built.
struct RailwayNetImpl : torch::nn::Module {
  RailwayNetImpl(int64_t features, int64_t tokens, int64_t d, int64_t layers, int64_t heads = 4, int64_t keep_first = 0,
                 int64_t keep_end = -1)
      : input(register_module("input", torch::nn::Linear(features, d))),
        pos(register_parameter("pos", torch::randn({tokens, 1, d}) * 0.02)),
        encoder(register_module("encoder", yard::nn::TransformerEncoder(d, heads, 2 * d, layers, keep_first, keep_end))),
        cls(register_module("cls", torch::nn::Linear(d, 5))),
        tok(register_module("tok", torch::nn::Linear(d, 5))),
        amp(register_module("amp", torch::nn::Linear(d, 1))) {}
  // x: (N, T, F)
  RailwayOut forward(torch::Tensor x) { return heads(layers(embed(x), 0, static_cast<int>(encoder->layers->size()))); }

  // The model as consecutive parts, for pipeline stages: the first stage embeds, every stage runs
  // its span of encoder layers, the last applies the heads. x: (N, T, F) -> (T, N, d).
  torch::Tensor embed(const torch::Tensor& x) { return input->forward(x).transpose(0, 1) + pos; }
  // Encoder layers [first, end): (T, N, d) -> (T, N, d).
  torch::Tensor layers(torch::Tensor h, int first, int end) {
    for (int i = first; i < end; ++i) h = encoder->layers[static_cast<size_t>(i)]->as<yard::nn::TransformerEncoderLayer>()->forward(h);
    return h;
  }
  // The parameters of a stage's parts, by name in the model (what the stage's optimizer steps and
  // its checkpoint holds).
  std::vector<std::pair<std::string, torch::Tensor>> part_parameters(int first, int end, bool with_embed, bool with_heads) {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (auto& p : named_parameters()) {
      const auto& n = p.key();
      bool mine = n.rfind("encoder.layers.", 0) == 0
                      ? [&] { int i = std::stoi(n.substr(15)); return i >= first && i < end; }()
                      : (n == "pos" || n.rfind("input.", 0) == 0) ? with_embed : with_heads;
      if (mine) out.emplace_back(n, p.value());
    }
    return out;
  }
  RailwayOut heads(const torch::Tensor& h) {
    int64_t T = h.size(0);
    // A defect is a local event: the strongest response of the middle half decides its class.
    auto [middle, all] = yard::nn::span_and_all_max(h, T / 4, 3 * T / 4);  // (N, d) each
    return {cls->forward(middle), tok->forward(h).transpose(0, 1), amp->forward(all).squeeze(-1)};
  }
  torch::nn::Linear input;
  torch::Tensor pos;
  yard::nn::TransformerEncoder encoder;
  torch::nn::Linear cls, tok, amp;
};
TORCH_MODULE(RailwayNet);

// The model's loss: the window's class (weighted), every token's class (a defect labels its own
// token and the next, where its ringing goes; a token with no defect counts a tenth, as defect
// tokens are few), and the amplitude.
inline const torch::Tensor& railway_token_weight() {
  static const torch::Tensor w = torch::tensor({0.1f, 1.f, 1.f, 1.f, 1.f});
  return w;
}
// The token labels the loss scores: a defect's ringing labels the token after it.
inline torch::Tensor railway_token_targets(const torch::Tensor& token_label) {
  auto ringing = torch::cat({token_label.slice(1, 0, 1), token_label.slice(1, 0, -1)}, 1);
  return torch::where(token_label.eq(0) & ringing.ne(4), ringing, token_label);
}
inline torch::Tensor railway_loss(const RailwayOut& out, const torch::Tensor& label, const torch::Tensor& token_label,
                                  const torch::Tensor& amp, const torch::Tensor& class_weight) {
  namespace F = torch::nn::functional;
  auto shifted = railway_token_targets(token_label);
  return F::cross_entropy(out.cls, label, F::CrossEntropyFuncOptions().weight(class_weight)) +
         0.5 * F::cross_entropy(out.tokens.reshape({-1, 5}), shifted.reshape({-1}),
                                F::CrossEntropyFuncOptions().weight(railway_token_weight())) +
         torch::mse_loss(out.amp, amp);
}
// The share of railway_loss over a whole batch (label, token_label, amp: the whole batch's) that
// its rows [first, first + n) carry, from the model's output on those rows: every weighted mean is
// normalised by the whole batch's weights, so the shares of a batch's parts add up to its loss
// (what a pipeline's micro-batches compute).
inline torch::Tensor railway_loss_share(const RailwayOut& part, const torch::Tensor& label, const torch::Tensor& token_label,
                                        const torch::Tensor& amp, const torch::Tensor& class_weight, int64_t first, int64_t n) {
  namespace F = torch::nn::functional;
  auto shifted = railway_token_targets(token_label);
  auto sum = F::CrossEntropyFuncOptions().reduction(torch::kSum);
  auto cls = F::cross_entropy(part.cls, label.narrow(0, first, n), sum.weight(class_weight)) /
             class_weight.index_select(0, label).sum();
  auto tok = F::cross_entropy(part.tokens.reshape({-1, 5}), shifted.narrow(0, first, n).reshape({-1}),
                              F::CrossEntropyFuncOptions().reduction(torch::kSum).weight(railway_token_weight())) /
             railway_token_weight().index_select(0, shifted.reshape({-1})).sum();
  auto a = (part.amp - amp.narrow(0, first, n)).pow(2).sum() / double(amp.numel());
  return cls + 0.5 * tok + a;
}
