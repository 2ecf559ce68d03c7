// yard::nn's Transformer encoder against LibTorch's: the same weights give the same outputs and
// the same gradients. c10 brings glog, whose CHECK macro would shadow Catch's: this file uses
// Catch's prefixed macros.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include "yard/actors/torch_state.h"
#include "yard/actors/transformer.h"

namespace {

// Copies every parameter of `from` into the same-named parameter of `to`.
void copy_by_name(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard ng;
  auto dst = to.named_parameters();
  for (auto& p : from.named_parameters()) {
    auto* t = dst.find(p.key());
    CATCH_REQUIRE(t != nullptr);
    t->copy_(p.value());
  }
  CATCH_REQUIRE(dst.size() == from.named_parameters().size());
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace

CATCH_TEST_CASE("fused self-attention matches softmax(q kᵀ/√d) v, forward and backward") {
  torch::manual_seed(3);
  for (auto [T, N, H, hd] : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 1}, {7, 3, 2, 5}, {128, 4, 4, 16}, {33, 2, 8, 8}}) {
    int64_t E = H * hd;
    auto qkv = torch::randn({T, N, 3 * E}, torch::requires_grad());
    auto out = yard::nn::self_attention(qkv, H);
    auto g = torch::randn({T, N, E});
    out.backward(g);
    // The reference: the unfused computation with LibTorch's ops.
    auto qkv2 = qkv.detach().clone().requires_grad_(true);
    auto parts = qkv2.chunk(3, -1);
    auto heads = [&](const torch::Tensor& t) { return t.reshape({T, N * H, hd}).transpose(0, 1); };  // (NH, T, hd)
    auto q = heads(parts[0]) / std::sqrt(static_cast<double>(hd)), k = heads(parts[1]), v = heads(parts[2]);
    auto ref = torch::bmm(torch::softmax(torch::bmm(q, k.transpose(1, 2)), -1), v).transpose(0, 1).reshape({T, N, E});
    ref.backward(g);
    CATCH_CAPTURE(T, N, H, hd);
    CATCH_CHECK(out.sizes() == ref.sizes());
    CATCH_CHECK(max_rel(out, ref) < 1e-5);
    CATCH_CHECK(max_rel(qkv.grad(), qkv2.grad()) < 1e-4);
  }
}

CATCH_TEST_CASE("self_attention rejects what it cannot take") {
  CATCH_CHECK_THROWS_WITH(yard::nn::self_attention(torch::randn({4, 2, 10}), 4), Catch::Contains("not a multiple of 3 x heads"));
  CATCH_CHECK_THROWS_WITH(yard::nn::self_attention(torch::randn({4, 2, 12}, torch::kDouble), 2), Catch::Contains("float32"));
}

CATCH_TEST_CASE("the encoder layer is LibTorch's TransformerEncoderLayer: same parameters, outputs and gradients") {
  torch::manual_seed(5);
  const int64_t d = 32, h = 4, ff = 64;
  torch::nn::TransformerEncoderLayer theirs(torch::nn::TransformerEncoderLayerOptions(d, h).dim_feedforward(ff).dropout(0.0));
  yard::nn::TransformerEncoderLayer ours(d, h, ff);
  // Same names, same shapes, same order.
  auto a = theirs->named_parameters(), b = ours->named_parameters();
  CATCH_REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CATCH_CHECK(a[i].key() == b[i].key());
    CATCH_CHECK(a[i].value().sizes() == b[i].value().sizes());
  }
  copy_by_name(*theirs, *ours);
  auto x = torch::randn({20, 3, d});
  auto y1 = theirs->forward(x), y2 = ours->forward(x);
  CATCH_CHECK(max_rel(y2, y1) < 1e-5);
  auto g = torch::randn_like(y1);
  y1.backward(g);
  y2.backward(g);
  for (size_t i = 0; i < a.size(); ++i) {
    CATCH_CAPTURE(a[i].key());
    CATCH_CHECK(max_rel(b[i].value().grad(), a[i].value().grad()) < 1e-4);
  }
}

CATCH_TEST_CASE("the encoder stacks independent layers") {
  yard::nn::TransformerEncoder enc(16, 2, 32, 3);
  CATCH_CHECK(enc->layers->size() == 3);
  auto p = enc->named_parameters();
  CATCH_CHECK(p.contains("layers.2.self_attn.in_proj_weight"));
  CATCH_CHECK(!torch::equal(p["layers.0.self_attn.in_proj_weight"], p["layers.1.self_attn.in_proj_weight"]));
  auto y = enc->forward(torch::randn({5, 2, 16}));
  CATCH_CHECK(y.sizes() == torch::IntArrayRef({5, 2, 16}));
  CATCH_CHECK(torch::isfinite(y).all().item<bool>());
}

CATCH_TEST_CASE("span_and_all_max: max(0)'s values and gradients over a span and the whole") {
  torch::manual_seed(5);
  for (auto shape : {std::vector<int64_t>{128, 4, 8}, std::vector<int64_t>{9, 3}}) {
    auto x = torch::randn(shape);
    // Ties: equal values in a column; the gradient goes to the first, as max(0)'s.
    x.select(0, 5).copy_(x.select(0, 2));
    x.select(0, 2).fill_(10), x.select(0, 5).fill_(10);
    // A NaN in a column is its maximum, and takes its gradient.
    x.select(0, x.size(0) / 2).view({-1})[1] = NAN;
    auto a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
    int64_t T = x.size(0), lo = T / 4, hi = 3 * T / 4;
    auto [span, all] = yard::nn::span_and_all_max(a, lo, hi);
    auto want_span = std::get<0>(b.slice(0, lo, hi).max(0)), want_all = std::get<0>(b.max(0));
    CATCH_CHECK(torch::equal(span.nan_to_num(-1), want_span.nan_to_num(-1)));
    CATCH_CHECK(torch::equal(all.nan_to_num(-1), want_all.nan_to_num(-1)));
    CATCH_CHECK(std::isnan(all.view({-1})[1].item<float>()));
    auto g1 = torch::randn(span.sizes()), g2 = torch::randn(all.sizes());
    ((span * g1).sum() + (all * g2).sum()).backward();
    ((want_span * g1).sum() + (want_all * g2).sum()).backward();
    CATCH_CHECK(torch::equal(a.grad(), b.grad()));
  }
  CATCH_CHECK_THROWS(yard::nn::span_and_all_max(torch::zeros({4, 2}), 3, 2));
}

// A pipeline stage builds only its part: its layers start as the whole encoder's under the same
// seed, load from the whole encoder's saved state, and the parts' tensors make a state the whole
// encoder loads.
CATCH_TEST_CASE("an encoder built as a part starts as the whole one's part; the parts make the whole one's state", "[nn][parts]") {
  using yard::nn::TransformerEncoder;
  auto built = [](int64_t first, int64_t end) {
    torch::manual_seed(7);
    return TransformerEncoder(16, 2, 32, 4, first, end);
  };
  auto whole = built(0, 4), a = built(0, 2), b = built(2, 4);
  CATCH_CHECK(a->parameters().size() * 2 == whole->parameters().size());
  auto wp = whole->named_parameters();
  yard::actors::NamedTensors parts;
  for (auto* part : {&a, &b})
    for (auto& p : (*part)->named_parameters()) {
      CATCH_CHECK(torch::equal(p.value(), wp[p.key()]));
      parts.emplace_back(p.key(), p.value().detach() * 2);
    }
  auto bytes = yard::actors::module_state_bytes(yard::actors::from_named_bytes(yard::actors::named_bytes(parts)));
  torch::manual_seed(8);
  TransformerEncoder fresh(16, 2, 32, 4);
  yard::actors::load_state(*fresh, bytes);
  for (auto& p : fresh->named_parameters()) CATCH_CHECK(torch::equal(p.value(), wp[p.key()] * 2));
  torch::manual_seed(9);
  TransformerEncoder c(16, 2, 32, 4, 2, 4);
  yard::actors::load_state(*c, bytes);
  for (auto& p : c->named_parameters()) CATCH_CHECK(torch::equal(p.value(), wp[p.key()] * 2));
  CATCH_CHECK_THROWS_AS(a->forward(torch::zeros({3, 1, 16})), std::logic_error);
  CATCH_CHECK_THROWS_WITH(TransformerEncoder(16, 2, 32, 4, 3, 2), Catch::Contains("encoder layers [3, 2) of 4"));
  CATCH_CHECK_THROWS_WITH(yard::actors::from_named_bytes("not a tensor archive"), Catch::Contains("do not read"));
}
