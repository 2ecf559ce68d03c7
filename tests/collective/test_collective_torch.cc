// LibTorch tensors through yard::collective, ranks as threads. c10 brings glog, whose CHECK
// macro would shadow Catch's: this file uses Catch's prefixed macros.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <thread>

#include "support.h"
#include "yard/collective_torch.h"

using namespace yard::collective;
using namespace std::chrono_literals;

CATCH_TEST_CASE("tensors: allreduce, coalesced, broadcast, allgather, reduce_scatter, async", "[collective][torch]") {
  const int world = 3;
  std::vector<std::thread> ts;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        GroupSpec s;
        s.name = "torch";
        s.world_size = world;
        s.rank = r;
        s.rendezvous = yard::test::shared_rendezvous();
        auto example = at::zeros({1});
        auto c = create_group_for(s, example);
        auto check = [&](bool ok, const char* what) {
          if (!ok) errors[r] += std::string(what) + "; ";
        };
        auto a = at::full({4, 5}, double(r + 1), at::kDouble);
        allreduce(*c, a);
        check(at::allclose(a, at::full({4, 5}, 6.0, at::kDouble)), "allreduce");

        std::vector<at::Tensor> grads = {at::full({7}, float(r)), at::full({2, 3}, float(2 * r))};
        allreduce_coalesced(*c, grads, ReduceOp::kAvg);
        check(at::allclose(grads[0], at::full({7}, 1.f)) && at::allclose(grads[1], at::full({2, 3}, 2.f)), "coalesced");

        auto h16 = at::full({33}, 1.5, at::kBFloat16);
        allreduce(*c, h16);
        check(at::allclose(h16.to(at::kFloat), at::full({33}, 4.5f)), "bfloat16");

        auto b = r == 0 ? at::arange(10, at::kLong) : at::zeros({10}, at::kLong);
        broadcast(*c, b, 0);
        check(at::equal(b, at::arange(10, at::kLong)), "broadcast");

        auto in = at::full({3}, int(r), at::kInt);
        auto out = at::empty({3 * world}, at::kInt);
        allgather(*c, in, out);
        check(out[0].item<int>() == 0 && out[3].item<int>() == 1 && out[8].item<int>() == 2, "allgather");

        auto rs_in = at::ones({world * 4});
        auto rs_out = at::empty({4});
        reduce_scatter(*c, rs_in, rs_out);
        check(at::allclose(rs_out, at::full({4}, float(world))), "reduce_scatter");

        auto big = at::full({1 << 16}, 1.f);
        auto w = allreduce_async(*c, big);
        w->wait(30s);
        check(at::allclose(big, at::full({1 << 16}, float(world))), "async");

        bool threw = false;
        try {
          auto nc = at::ones({4, 4}).t();  // not contiguous
          allreduce(*c, nc);
        } catch (const CollectiveError&) {
          threw = true;
        }
        check(threw, "non-contiguous rejected");
        threw = false;
        try {
          auto h = at::ones({4}, at::kBool);
          allreduce(*c, h);
        } catch (const CollectiveError&) {
          threw = true;
        }
        check(threw, "unsupported dtype rejected");
        c->destroy();
      } catch (const std::exception& e) {
        errors[r] += e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < world; ++r) {
    CATCH_INFO("rank " << r << ": " << errors[r]);
    CATCH_CHECK(errors[r].empty());
  }
}
