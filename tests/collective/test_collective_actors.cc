// A collective group over actors on a real embedded cluster: the driver hands out ranks, the
// actors meet through their job's rendezvous store in the control store and all-reduce, and
// leave nothing behind there.
#include <catch2/catch.hpp>

#include "yard/collective.h"
#include "yard/job_store.h"
#include "yard/yard.h"

using namespace yard::collective;
using namespace std::chrono_literals;

namespace {
class Member {
 public:
  Member() = default;
  // Joins and all-reduces in one call: every member must be inside it at the same time.
  std::vector<double> join_and_reduce(std::string group, int world, int rank, std::string gen) {
    auto c = create_group(cluster_group(group, world, rank, gen));
    std::vector<double> v(1000, rank + 1.0);
    c->allreduce(v.data(), v.size(), DType::kFloat64, ReduceOp::kSum);
    c->destroy();
    return v;
  }
};
YARD_ACTOR(Member, yard::ctor<>, &Member::join_and_reduce);
}  // namespace

void yard_test_worker_hook(int argc, char** argv) {
  yard::InitOptions o;
  o.num_cpus = 4;
  yard::init(o, argc, argv);
}

TEST_CASE("actors form a group through the cluster and all-reduce", "[collective][actors]") {
  // The store the members meet in: the job's, in the space cluster_group names.
  auto meet = yard::job_rendezvous("collective");
  for (int round = 0; round < 2; ++round) {  // the same name twice: no stale rendezvous
    const int world = 3;
    std::vector<yard::ActorHandle<Member>> members;
    for (int r = 0; r < world; ++r) members.push_back(yard::actor<Member>().remote());
    std::vector<yard::ObjectRef<std::vector<double>>> refs;
    for (int r = 0; r < world; ++r)
      refs.push_back(members[r].call(&Member::join_and_reduce).remote("grads", world, r, "g" + std::to_string(round)));
    for (auto& v : yard::get(refs, 120s)) {
      REQUIRE(v->size() == 1000);
      CHECK((*v)[0] == 6.0);
      CHECK(v->back() == 6.0);
    }
    for (auto& m : members) yard::kill(m);
    // destroy() removed the group's keys: the members' addresses and the leaving count.
    auto gen = "grads:g" + std::to_string(round) + ":";
    CHECK(meet->absent({gen + "left", gen + "host_0", gen + "host_1", gen + "host_2"}).size() == 4);
  }
}
