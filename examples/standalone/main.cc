// A program built outside the Switchyard tree, against the installed package: copy this folder,
// then build it with meson (pkg-config) or CMake (find_package), as its README part says.
//
// Without YARD_ADDRESS it starts an embedded local cluster (the installed `yard` is found beside
// the installed library); with YARD_ADDRESS=host:port (and YARD_TOKEN) it joins that cluster.
#include <cstdio>
#include <string>
#include <vector>

#include <yard/collective.h>
#include <yard/yard.h>

std::string greet(std::string who) { return "hello, " + who; }
YARD_REMOTE(greet);

class Tally {
 public:
  Tally() = default;
  long add(long v) { return total_ += v; }

 private:
  long total_ = 0;
};
YARD_ACTOR(Tally, yard::ctor<>, &Tally::add);

int main(int argc, char** argv) {
  yard::init(argc, argv);
  auto hello = yard::task(greet).remote(std::string("standalone"));
  auto tally = yard::actor<Tally>().remote();
  std::vector<yard::ObjectRef<long>> sums;
  for (long i = 1; i <= 10; ++i) sums.push_back(tally.call(&Tally::add).remote(i));
  long last = *yard::get(sums).back();

  // A one-member collective group, met through the cluster's control store.
  auto group = yard::collective::create_group(yard::collective::cluster_group("standalone", 1, 0, "0"));
  std::vector<float> v = {1.5f, 2.5f};
  group->allreduce(v.data(), v.size(), yard::collective::DType::kFloat32, yard::collective::ReduceOp::kSum);
  group->destroy();

  std::printf("%s; tally 1..10 = %ld; allreduce %.1f %.1f; cluster %s\n", hello.get()->c_str(), last, v[0], v[1],
              yard::cluster_address().c_str());
  return *hello.get() == "hello, standalone" && last == 55 && v[1] == 2.5f ? 0 : 1;
}
