// The README's example: tasks, an actor, object refs passed as arguments, errors from remote code.
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "yard/yard.h"

int add(int a, int b) { return a + b; }
double mean(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("mean of nothing");
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
YARD_REMOTE(add, mean);

class Counter {
 public:
  explicit Counter(int start) : n_(start) {}
  int incr(int by) { return n_ += by; }
  int value() const { return n_; }

 private:
  int n_;
};
YARD_ACTOR(Counter, yard::ctor<int>, &Counter::incr, &Counter::value);

int main(int argc, char** argv) {
  yard::init(argc, argv);  // joins YARD_ADDRESS, or starts a local cluster
  std::printf("connected to %s\n", yard::cluster_address().c_str());

  auto sum = yard::task(add).remote(1, 2);
  auto c = yard::actor<Counter>(10).name("counter").remote();
  auto r = c.call(&Counter::incr).remote(sum);  // an ObjectRef as argument: resolved first
  std::printf("add(1, 2) = %d, counter after incr = %d\n", *sum.get(), *r.get());

  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 100; ++i) refs.push_back(yard::task(add).remote(i, i));
  int total = 0;
  for (auto& v : yard::get(refs)) total += *v;
  std::printf("sum of 100 tasks = %d\n", total);

  try {
    yard::task(mean).remote(std::vector<double>{}).get();
  } catch (const yard::RemoteError& e) {
    std::printf("remote error: %s\n", e.what());
  }
  auto again = yard::get_actor<Counter>("counter");
  std::printf("named actor value = %d\n", *again.call(&Counter::value).remote().get());
  return *r.get() == 13 && total == 9900 ? 0 : 1;
}
