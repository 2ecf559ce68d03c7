// Pipeline stages as threads of one process, meeting through a rendezvous store in memory: the gradients of
// a step run by P = 2 and P = 4 stages under 1F1B are those of single-process training on the same
// micro-batches, evaluation gives the same outputs, and a stage whose neighbour is gone fails
// naming itself and the neighbour.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <map>
#include <thread>

#include "support.h"
#include "yard/actors/pipeline.h"
#include "yard/actors/transformer.h"

using namespace yard::actors;

namespace {

constexpr int64_t kFeatures = 5, kTokens = 6, kD = 16, kLayers = 4, kBatch = 10;

// The test model: an input projection, kLayers encoder layers, a head; units are the layers.
struct Net : torch::nn::Module {
  Net() {
    input = register_module("input", torch::nn::Linear(kFeatures, kD));
    encoder = register_module("encoder", yard::nn::TransformerEncoder(kD, 2, 2 * kD, kLayers));
    head = register_module("head", torch::nn::Linear(kD, 1));
  }
  // Stage span's part: the first stage embeds, the last applies the head.
  torch::Tensor part(torch::Tensor x, StageSpan s) {
    if (s.first == 0) x = input->forward(x).transpose(0, 1);  // (N, T, F) -> (T, N, d)
    for (int i = s.first; i < s.end; ++i) x = encoder->layers[size_t(i)]->as<yard::nn::TransformerEncoderLayer>()->forward(x);
    if (s.end == kLayers) x = head->forward(x).mean(0).squeeze(-1);  // (N)
    return x;
  }
  torch::nn::Linear input{nullptr}, head{nullptr};
  yard::nn::TransformerEncoder encoder{nullptr};
};

struct Data {
  torch::Tensor x = torch::randn({kBatch, kTokens, kFeatures}), y = torch::randn({kBatch});
  std::vector<int64_t> sizes = micro_batch_sizes(kBatch, 4);
  std::vector<int64_t> offset() const {
    std::vector<int64_t> o{0};
    for (auto s : sizes) o.push_back(o.back() + s);
    return o;
  }
  torch::Tensor x_of(int m) const { return x.narrow(0, offset()[size_t(m)], sizes[size_t(m)]); }
  torch::Tensor y_of(int m) const { return y.narrow(0, offset()[size_t(m)], sizes[size_t(m)]); }
  torch::Tensor loss(int m, const torch::Tensor& out) const {
    return torch::mse_loss(out, y_of(m)) * double(sizes[size_t(m)]) / double(kBatch);
  }
};

std::map<std::string, torch::Tensor> grads_of(Net& n) {
  std::map<std::string, torch::Tensor> g;
  for (auto& p : n.named_parameters())
    if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
  return g;
}

yard::collective::GroupSpec base(const std::string& name) {
  yard::collective::GroupSpec s;
  s.name = name;
  s.rendezvous = yard::test::shared_rendezvous();
  return s;
}

StageWork work_of(Net& net, const Data& d, StageSpan span) {
  StageWork w;
  w.forward = [&net, span](const torch::Tensor& x) { return net.part(x, span); };
  w.input = [&d](int m) { return d.x_of(m); };
  w.input_shape = [&d](int m) { return std::vector<int64_t>{kTokens, d.sizes[size_t(m)], kD}; };
  w.loss = [&d](int m, const torch::Tensor& out) { return d.loss(m, out); };
  return w;
}

}  // namespace

CATCH_TEST_CASE("P = 2 and P = 4 stages under 1F1B give single-process gradients and outputs", "[pipeline][stages]") {
  torch::set_num_threads(1);
  torch::manual_seed(3);
  Data d;
  auto reference = std::make_shared<Net>();
  double ref_loss = 0;
  for (int m = 0; m < 4; ++m) {
    auto l = d.loss(m, reference->part(d.x_of(m), {0, kLayers}));
    ref_loss += l.item<double>();
    l.backward();
  }
  auto want = grads_of(*reference);
  torch::Tensor ref_out;
  {
    torch::NoGradGuard ng;
    ref_out = reference->part(d.x, {0, kLayers});
  }
  for (int stages : {2, 4}) {
    CATCH_INFO("stages " << stages);
    auto spans = plan_stages(std::vector<double>(kLayers, 1.0), stages);
    std::vector<std::shared_ptr<Net>> nets;
    for (int s = 0; s < stages; ++s) {
      torch::manual_seed(0);
      nets.push_back(std::make_shared<Net>());
      // The replicas start from the reference's weights.
      torch::NoGradGuard ng;
      auto from = reference->named_parameters();
      for (auto& p : nets.back()->named_parameters()) p.value().copy_(from[p.key()]);
    }
    std::vector<double> losses(static_cast<size_t>(stages));
    std::vector<torch::Tensor> outputs(4);
    std::vector<std::string> errors(static_cast<size_t>(stages));
    std::vector<std::thread> ts;
    for (int s = 0; s < stages; ++s)
      ts.emplace_back([&, s] {
        try {
          PipelineStage stage(s, stages, PipelineLinks::join(base("p" + std::to_string(stages)), s, stages));
          auto w = work_of(*nets[size_t(s)], d, spans[size_t(s)]);
          losses[size_t(s)] = stage.train(4, w);
          stage.infer(4, w, [&](int m, const torch::Tensor& y) { outputs[size_t(m)] = y.clone(); });
          stage.destroy();
        } catch (const std::exception& e) {
          errors[size_t(s)] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errors) CATCH_CHECK(e == "");
    CATCH_CHECK(losses.back() == Approx(ref_loss).epsilon(1e-6));
    for (int s = 0; s + 1 < stages; ++s) CATCH_CHECK(losses[size_t(s)] == 0);
    // Each stage's parameters carry the reference's gradients; the others none.
    size_t compared = 0;
    for (int s = 0; s < stages; ++s)
      for (auto& [name, g] : grads_of(*nets[size_t(s)])) {
        CATCH_INFO("stage " << s << " " << name);
        CATCH_REQUIRE(want.count(name));
        CATCH_CHECK(torch::allclose(g, want[name], 1e-4, 1e-6));
        ++compared;
      }
    CATCH_CHECK(compared == want.size());
    CATCH_CHECK(torch::allclose(torch::cat(outputs), ref_out, 1e-5, 1e-6));
  }
}

CATCH_TEST_CASE("a stage whose neighbour is gone fails naming itself and the neighbour", "[pipeline][stages]") {
  torch::set_num_threads(1);
  torch::manual_seed(4);
  Data d;
  auto net = std::make_shared<Net>();
  std::string error;
  std::thread first([&] {
    try {
      PipelineStage stage(0, 2, PipelineLinks::join(base("gone"), 0, 2), std::chrono::seconds(10));
      stage.train(4, work_of(*net, d, {0, 2}));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  {
    // The second stage joins, then its process is as good as gone: its links close unannounced.
    auto links = PipelineLinks::join(base("gone"), 1, 2);
  }
  first.join();
  CATCH_INFO(error);
  CATCH_CHECK_THAT(error, Catch::Contains("pipeline stage 0") && Catch::Contains("stage 1"));
}
