// LibTorch tensors as task arguments, results and objects (yard/tensor_codec.h), on an embedded
// cluster: every dtype and shape arrives equal, a TensorView reads a same-host argument in place
// (its memory is the sender's shared-memory segment), a result comes back, malformed bytes are
// refused with a message. c10 brings glog, whose CHECK macro would shadow Catch's: this file uses
// Catch's prefixed macros.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <fstream>
#include <string>

#include "yard/tensor_codec.h"
#include "yard/yard.h"

using namespace std::chrono_literals;

namespace {

at::Tensor doubled(at::Tensor t) { return t.mul_(2); }
double total(yard::TensorView v) { return v.tensor().sum().item<double>(); }
// Where the view's elements live: "shm" when in a /dev/shm mapping of this process.
std::string lives_in(yard::TensorView v) {
  auto at = reinterpret_cast<uintptr_t>(v.tensor().data_ptr());
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= at && at < hi)
      return line.find("/dev/shm/") != std::string::npos ? "shm" : "heap";
  }
  return "nowhere";
}
YARD_REMOTE(doubled, total, lives_in);

}  // namespace

void yard_test_worker_hook(int argc, char** argv) {
  yard::InitOptions o;
  o.num_cpus = 2;
  yard::init(o, argc, argv);  // workers never return from here
}

CATCH_TEST_CASE("tensors of every dtype and shape survive encoding; malformed bytes are refused", "[tensor]") {
  std::vector<at::Tensor> ts = {at::arange(12, at::kFloat).reshape({3, 4}), at::arange(5, at::kLong),
                                at::full({2, 0, 3}, 1.0, at::kDouble), at::scalar_tensor(7, at::kInt),
                                at::arange(6, at::kFloat).reshape({2, 3}).t(),  // not contiguous
                                at::ones({4}, at::kBFloat16), at::arange(3, at::kInt).remainder(2).to(at::kBool),
                                at::arange(8, at::kByte)};
  for (auto& t : ts) {
    auto b = yard::encode(t);
    auto back = yard::decode<at::Tensor>(b);
    CATCH_CHECK(back.scalar_type() == t.scalar_type());
    CATCH_CHECK(back.sizes() == t.sizes());
    CATCH_CHECK(at::equal(back, t));
    auto view = yard::decode<yard::TensorView>(b).tensor();
    CATCH_CHECK(at::equal(view, t));
  }
  // A decoded tensor owns its storage; a view reads the bytes.
  auto b = yard::encode(at::arange(1000, at::kFloat));
  auto own = yard::decode<at::Tensor>(b);
  auto view = yard::decode<yard::TensorView>(b).tensor();
  CATCH_CHECK(static_cast<const char*>(view.data_ptr()) >= b->data());
  CATCH_CHECK(static_cast<const char*>(view.data_ptr()) < b->data() + b->size());
  CATCH_CHECK(static_cast<const char*>(own.data_ptr()) != static_cast<const char*>(view.data_ptr()));

  auto bad = [](std::string s) { return std::make_shared<yard::detail::StringBuffer>(std::move(s)); };
  CATCH_CHECK_THROWS_WITH(yard::decode<at::Tensor>(bad("not a tensor at all")), Catch::Contains("tensor header"));
  std::string cut(b->data(), b->size() - 4);
  CATCH_CHECK_THROWS_WITH(yard::decode<at::Tensor>(bad(cut)), Catch::Contains("elements of 4 bytes"));
  std::string big_dim(b->data(), b->size());
  int64_t huge = int64_t(1) << 60;
  std::memcpy(big_dim.data() + 16, &huge, 8);
  CATCH_CHECK_THROWS_WITH(yard::decode<at::Tensor>(bad(big_dim)), Catch::Contains("1152921504606846976 elements"));
  auto b2 = yard::encode(at::ones({2, 2}));
  std::string overflow(b2->data(), b2->size());
  std::memcpy(overflow.data() + 16, &huge, 8);
  std::memcpy(overflow.data() + 24, &huge, 8);
  CATCH_CHECK_THROWS_WITH(yard::decode<at::Tensor>(bad(overflow)), Catch::Contains("dimension 1"));
  CATCH_CHECK_THROWS_WITH(yard::encode(at::ones({2, 2}).to_sparse()), Catch::Contains("sparse"));
}

CATCH_TEST_CASE("tensors as task arguments and results; a view reads a large one in place", "[tensor][cluster]") {
  auto x = at::arange(6, at::kFloat).reshape({2, 3});
  auto back = yard::task(doubled).remote(x).get(60s);
  CATCH_CHECK(at::equal(*back, x * 2));
  CATCH_CHECK(at::equal(x, at::arange(6, at::kFloat).reshape({2, 3})));  // the sender's tensor is untouched

  auto big = at::ones({4 << 20}, at::kFloat);  // 16 MB: through shared memory
  CATCH_CHECK(*yard::task(total).remote(big).get(60s) == double(4 << 20));
  CATCH_CHECK(*yard::task(lives_in).remote(big).get(60s) == "shm");
  auto ref = yard::put(big);
  CATCH_CHECK(*yard::task(total).remote(ref).get(60s) == double(4 << 20));
  CATCH_CHECK(*yard::task(lives_in).remote(ref).get(60s) == "shm");
  auto twice = yard::task(doubled).remote(ref).get(60s);
  CATCH_CHECK(twice->sum().item<double>() == 2.0 * (4 << 20));
  CATCH_CHECK(ref.get(60s)->sum().item<double>() == double(4 << 20));  // the object is untouched
}
