// One rank of a collective group as its own process, for the multi-process collective tests.
// Environment: RANK, WORLD, REDIS, NAME, SHM (0/1), DIE_RANK (this rank SIGKILLs itself after
// joining), RECV_FIRST (rank 0 starts with a receive from rank 1), LINK_KEY (the group's link key; with YARD_HOST_ID set per rank, the ranks count as
// different hosts and seal their traffic). Exit codes: 0 all results right, 1 a wrong result,
// 3 CollectiveError (printed).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "yard/collective.h"

using namespace yard::collective;

int main() {
  int rank = atoi(getenv("RANK")), world = atoi(getenv("WORLD"));
  GroupSpec s;
  s.name = getenv("NAME");
  s.world_size = world;
  s.rank = rank;
  s.rendezvous = yard::rendezvous_at(getenv("REDIS"));
  s.shared_memory = std::string(getenv("SHM")) == "1";
  s.timeout = std::chrono::seconds(20);
  if (const char* k = getenv("LINK_KEY")) s.link_key = k;
  try {
    auto c = create_group(s);
    if (const char* d = getenv("DIE_RANK"); d && atoi(d) == rank) raise(SIGKILL);
    Options o;
    o.timeout = std::chrono::seconds(3);
    int bad = 0;
    if (getenv("RECV_FIRST") && rank == 0) {  // waits on rank 1 alone, point to point
      std::vector<int32_t> got(1000);
      c->recv(got.data(), got.size(), DType::kInt32, 1, o);
    }
    if (c->encrypts_traffic() != (getenv("EXPECT_SEALED") != nullptr)) {
      std::fprintf(stderr, "rank %d: traffic %s\n", rank, c->encrypts_traffic() ? "sealed" : "in clear");
      return 1;
    }
    for (size_t n : {size_t(1), size_t(1031), size_t(3) << 20}) {
      std::vector<double> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = rank + 0.25 * static_cast<double>(i % 8);
      c->allreduce(v.data(), n, DType::kFloat64, ReduceOp::kSum, o);
      for (size_t i = 0; i < n; ++i)
        bad += v[i] != world * (world - 1) / 2.0 + world * 0.25 * static_cast<double>(i % 8);
      std::vector<int32_t> b(n, rank == 1 % world ? 42 : 0);
      c->broadcast(b.data(), n, DType::kInt32, 1 % world, o);
      for (auto x : b) bad += x != 42;
      std::vector<int64_t> in(n, rank), out(n * world);
      c->allgather(in.data(), out.data(), n, DType::kInt64, o);
      for (int q = 0; q < world; ++q) bad += out[q * n] != q || out[q * n + n - 1] != q;
      // The whole reduction at the root only; a point-to-point message each way between 0 and 1.
      std::vector<float> f(n, float(rank + 1));
      c->reduce(f.data(), n, DType::kFloat32, ReduceOp::kMax, 0, o);
      if (rank == 0) bad += f.front() != float(world) || f.back() != float(world);
      if (rank < 2) {
        std::vector<int32_t> m(n, rank == 0 ? 7 : 9), got(n, 0);
        if (rank == 0) c->send(m.data(), n, DType::kInt32, 1, o), c->recv(got.data(), n, DType::kInt32, 1, o);
        if (rank == 1) c->recv(got.data(), n, DType::kInt32, 0, o), c->send(m.data(), n, DType::kInt32, 0, o);
        bad += got.front() != (rank == 0 ? 9 : 7) || got.back() != (rank == 0 ? 9 : 7);
      }
    }
    c->destroy(o);
    if (bad) std::fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
    return bad ? 1 : 0;
  } catch (const CollectiveError& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
}
