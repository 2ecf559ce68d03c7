// Collective operations with N ranks as threads, each with its own transport and store
// connection, meeting through a real redis-server. Every result is checked element by element
// against a locally computed reference.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <sys/wait.h>

#include <fstream>

#include <thread>

#include "../../collective/src/bf16.h"
#include "support.h"
#include "yard/collective.h"

using namespace yard::collective;
using namespace std::chrono_literals;

namespace {

yard::test::RedisServer& redis() { return yard::test::shared_redis(); }
// The threads of a test meet through one store on the shared redis-server.
std::shared_ptr<yard::Rendezvous> store() {
  static auto s = yard::rendezvous_at(redis().address());
  return s;
}

GroupSpec spec_for(const std::string& name, int world, int rank) {
  GroupSpec s;
  s.name = name;
  s.world_size = world;
  s.rank = rank;
  s.rendezvous = store();
  s.timeout = 20s;
  return s;
}

// The transports under test: loopback TCP (Gloo), shared memory, and shared memory with tiny
// chunks so every multi-chunk and uneven-split path runs on small inputs.
enum class Path { kTcp, kShm, kShmTiny };
const char* path_name(Path p) { return p == Path::kTcp ? "tcp" : p == Path::kShm ? "shm" : "shm-tiny"; }

// Runs fn(rank, comm) on `world` threads; rethrows the first failure.
void run_ranks(const std::string& name, int world, const std::function<void(int, Communicator&)>& fn,
               Path path = Path::kShm) {
  redis();
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(world);
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        auto s = spec_for(name + "-" + path_name(path), world, r);
        s.shared_memory = path != Path::kTcp;
        if (path == Path::kShmTiny) s.shm_chunk_bytes = 64;
        auto c = create_group(s);
        if (world > 1 && c->uses_shared_memory() != (path != Path::kTcp))
          throw std::runtime_error("wrong transport chosen");
        fn(r, *c);
        c->destroy();
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

template <class T>
T value(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<T>(1 + (i + rank) % 3);
  return static_cast<T>((rank + 1) * 3 + static_cast<int>(i % 5));
}

template <class T>
T reference(int world, size_t i, ReduceOp op) {
  T acc = value<T>(0, i, op);
  for (int r = 1; r < world; ++r) {
    T v = value<T>(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc = static_cast<T>(acc + v); break;
      case ReduceOp::kProduct: acc = static_cast<T>(acc * v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(world));
  return acc;
}

template <class T>
DType dtype_of();
template <> DType dtype_of<float>() { return DType::kFloat32; }
template <> DType dtype_of<double>() { return DType::kFloat64; }
template <> DType dtype_of<int32_t>() { return DType::kInt32; }
template <> DType dtype_of<int64_t>() { return DType::kInt64; }

template <class T>
void check_allreduce(Communicator& c, size_t n, ReduceOp op, std::atomic<int>& bad) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value<T>(c.rank(), i, op);
  c.allreduce(v.data(), n, dtype_of<T>(), op);
  for (size_t i = 0; i < n; ++i) {
    T want = reference<T>(c.world_size(), i, op);
    bool ok = std::is_floating_point_v<T> ? std::abs(double(v[i]) - double(want)) <= 1e-5 * std::abs(double(want))
                                          : v[i] == want;
    if (!ok) {
      ++bad;
      return;
    }
  }
}

void check_allreduce_bf16(Communicator& c, size_t n, ReduceOp op, std::atomic<int>& bad) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float_to_bf16(value<float>(c.rank(), i, op));
  c.allreduce(v.data(), n, DType::kBFloat16, op);
  for (size_t i = 0; i < n; ++i) {
    float want = reference<float>(c.world_size(), i, op);
    if (std::abs(bf16_to_float(v[i]) - want) > std::abs(want) / 128.f + 1e-6f) {
      ++bad;
      return;
    }
  }
}

}  // namespace

TEST_CASE("allreduce over world sizes, sizes, dtypes and ops matches the reference", "[collective]") {
  auto path = GENERATE(Path::kTcp, Path::kShm, Path::kShmTiny);
  INFO(path_name(path));
  for (int world : {1, 2, 3, 4, 7}) {
    std::atomic<int> bad{0};
    run_ranks("sweep-" + std::to_string(world), world, [&](int, Communicator& c) {
      // Tiny chunks make every element a barrier: the large size adds nothing there but time.
      for (size_t n : {size_t(0), size_t(1), size_t(1031), path == Path::kShmTiny ? size_t(4099) : size_t(1) << 18})
        for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
          check_allreduce<float>(c, n, op, bad);
          check_allreduce<double>(c, n, op, bad);
          check_allreduce<int32_t>(c, n, op, bad);
          check_allreduce<int64_t>(c, n, op, bad);
          check_allreduce_bf16(c, n, op, bad);
        }
    }, path);
    INFO("world " << world);
    CHECK(bad == 0);
  }
}

TEST_CASE("broadcast, reduce, allgather, reduce_scatter, coalesced allreduce, send/recv", "[collective]") {
  auto path = GENERATE(Path::kTcp, Path::kShm, Path::kShmTiny);
  INFO(path_name(path));
  for (int world : {1, 2, 3, 4, 7}) {
    std::atomic<int> bad{0};
    run_ranks("ops-" + std::to_string(world), world, [&](int rank, Communicator& c) {
      for (size_t n : {size_t(0), size_t(1), size_t(1031)}) {
        int root = world - 1;
        std::vector<double> b(n, rank == root ? 2.5 : -1.0);
        c.broadcast(b.data(), n, DType::kFloat64, root);
        for (auto x : b) bad += x != 2.5;

        std::vector<int64_t> r(n, rank + 1);
        c.reduce(r.data(), n, DType::kInt64, ReduceOp::kSum, 0);
        if (rank == 0)
          for (auto x : r) bad += x != int64_t(world) * (world + 1) / 2;

        std::vector<int32_t> in(n), out(n * world, -1);
        for (size_t i = 0; i < n; ++i) in[i] = rank * 1000 + static_cast<int>(i);
        c.allgather(in.data(), out.data(), n, DType::kInt32);
        for (int q = 0; q < world; ++q)
          for (size_t i = 0; i < n; ++i) bad += out[q * n + i] != q * 1000 + static_cast<int>(i);

        std::vector<float> rs_in(n * world), rs_out(n, -1);
        for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(i % 11 + rank);
        c.reduce_scatter(rs_in.data(), rs_out.data(), n, DType::kFloat32, ReduceOp::kSum);
        for (size_t i = 0; i < n; ++i) {
          size_t g = rank * n + i;
          float want = static_cast<float>(world * (g % 11)) + static_cast<float>(world * (world - 1) / 2);
          bad += rs_out[i] != want;
        }

        std::vector<float> a(n, float(rank)), bb(n + 3, float(2 * rank));
        c.allreduce_coalesced({{a.data(), a.size()}, {bb.data(), bb.size()}}, DType::kFloat32, ReduceOp::kSum);
        float s = float(world * (world - 1) / 2);
        for (auto x : a) bad += x != s;
        for (auto x : bb) bad += x != 2 * s;
      }
      c.barrier();
      if (world > 1) {
        // A ring: everyone sends to the next and receives from the previous.
        std::vector<int64_t> mine(17, rank), theirs(17, -1);
        Options o;
        o.tag = 7;
        std::thread sender([&] { c.send(mine.data(), mine.size(), DType::kInt64, (rank + 1) % world, o); });
        c.recv(theirs.data(), theirs.size(), DType::kInt64, (rank + world - 1) % world, o);
        sender.join();
        for (auto x : theirs) bad += x != (rank + world - 1) % world;
      }
    }, path);
    INFO("world " << world);
    CHECK(bad == 0);
  }
}

TEST_CASE("send and receive: messages larger than the pipe, tags out of order, concurrent receives",
          "[collective][p2p]") {
  auto path = GENERATE(Path::kTcp, Path::kShm, Path::kShmTiny);
  INFO(path_name(path));
  std::atomic<int> bad{0};
  const size_t big = (3u << 20) / sizeof(float);  // 3 MiB: three times the shared-memory pipe
  run_ranks("p2p", 2, [&](int rank, Communicator& c) {
    // Rank 0 sends tags 1 (big), 2 and 3 from three threads; rank 1 receives them on three threads,
    // so whichever receive reads the pipe first keeps the others' messages for them.
    std::vector<std::thread> ts;
    std::vector<std::vector<float>> bufs{std::vector<float>(big), std::vector<float>(5), std::vector<float>(1)};
    for (uint32_t tag = 1; tag <= 3; ++tag)
      ts.emplace_back([&, tag] {
        auto& b = bufs[tag - 1];
        Options o;
        o.tag = tag;
        if (rank == 0) {
          for (size_t i = 0; i < b.size(); ++i) b[i] = float(tag * 1000 + i % 977);
          c.send(b.data(), b.size(), DType::kFloat32, 1, o);
        } else {
          c.recv(b.data(), b.size(), DType::kFloat32, 0, o);
          for (size_t i = 0; i < b.size(); ++i) bad += b[i] != float(tag * 1000 + i % 977);
        }
      });
    for (auto& t : ts) t.join();
    // Then in one thread, the receives in the reverse order of the sends (the sends on their own
    // threads: over TCP a send waits for its receive).
    Options o3, o4;
    o3.tag = 30, o4.tag = 40;
    std::vector<int64_t> a(100, rank), b(7, rank);
    if (rank == 0) {
      std::thread t([&] { c.send(a.data(), a.size(), DType::kInt64, 1, o3); });
      c.send(b.data(), b.size(), DType::kInt64, 1, o4);
      t.join();
    } else {
      c.recv(b.data(), b.size(), DType::kInt64, 0, o4);
      c.recv(a.data(), a.size(), DType::kInt64, 0, o3);
      for (auto x : a) bad += x != 0;
      for (auto x : b) bad += x != 0;
    }
  }, path);
  CHECK(bad == 0);
}

TEST_CASE("send and receive on shared memory: a wrong size or a silent peer is a clear error; the link goes on",
          "[collective][p2p][failure]") {
  std::atomic<int> bad{0};
  run_ranks("p2p-errors", 2, [&](int rank, Communicator& c) {
    Options o;
    o.timeout = 300ms;
    std::vector<float> ten(10, 1.f), nine(9);
    if (rank == 0) {
      c.send(ten.data(), ten.size(), DType::kFloat32, 1, o);
      c.barrier();
    } else {
      CHECK_THROWS_WITH(c.recv(nine.data(), nine.size(), DType::kFloat32, 0, o),
                        Catch::Contains("rank 0 sent 40 bytes") && Catch::Contains("expected 36"));
      auto t0 = std::chrono::steady_clock::now();
      CHECK_THROWS_WITH(c.recv(nine.data(), nine.size(), DType::kFloat32, 0, o),
                        Catch::Contains("group 'p2p-errors-shm'") && Catch::Contains("timed out"));
      CHECK(std::chrono::steady_clock::now() - t0 < 5s);
      c.barrier();
    }
    // The messages after them still arrive whole.
    std::vector<float> v(1000, float(rank));
    if (rank == 0) c.send(v.data(), v.size(), DType::kFloat32, 1, o);
    if (rank == 1) c.recv(v.data(), v.size(), DType::kFloat32, 0, o);
    for (auto x : v) bad += x != 0.f;
  });
  CHECK(bad == 0);
}

TEST_CASE("a rank that never arrives fails the others with a clear error", "[collective][failure]") {
  redis();
  auto s = spec_for("absent", 3, 0);
  s.timeout = 800ms;
  std::exception_ptr e1;
  std::thread t([&] {
    try {
      auto s1 = spec_for("absent", 3, 1);
      s1.timeout = 800ms;
      create_group(s1);
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(create_group(s), Catch::Contains("absent") && Catch::Contains("did not arrive"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  t.join();
  CHECK(e1);
}

TEST_CASE("a rank that leaves mid-operation fails the survivor within its timeout", "[collective][failure]") {
  redis();
  bool shm = GENERATE(false, true);
  std::string name = shm ? "leaver-shm" : "leaver-tcp";
  std::thread other([&] {
    auto s = spec_for(name, 2, 1);
    s.shared_memory = shm;
    auto c = create_group(s);
    c.reset();  // gone without taking part
  });
  auto s0 = spec_for(name, 2, 0);
  s0.shared_memory = shm;
  auto c = create_group(s0);
  other.join();
  std::vector<float> v(1000, 1.f);
  Options o;
  o.timeout = 1s;
  auto t0 = std::chrono::steady_clock::now();
  if (shm)
    CHECK_THROWS_WITH(c->allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum, o),
                      Catch::Contains("group '" + name + "'") && Catch::Contains("rank(s) 1"));
  else
    CHECK_THROWS_AS(c->allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum, o), CollectiveError);
  // The survivor leaves and forms a new group (a new generation) with who is left.
  c->destroy();
  auto again = spec_for(name, 1, 0);
  again.generation = "after-failure";
  auto c2 = create_group(again);
  c2->allreduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
  CHECK(v[0] == 1.f);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
}

TEST_CASE("the same group name is destroyed and re-created 100 times without stale keys", "[collective]") {
  for (int i = 0; i < 100; ++i) {
    std::atomic<int> bad{0};
    run_ranks("again", 2, [&](int rank, Communicator& c) {
      int64_t v = rank + i;
      c.allreduce(&v, 1, DType::kInt64, ReduceOp::kSum);
      bad += v != 2 * i + 1;
    });
    REQUIRE(bad == 0);
  }
  yard::detail::Redis r("127.0.0.1", redis().port(), "", 2s);
  auto left = r.cmd({"KEYS", "again:*"});
  CHECK(left.size() == 0);
}

TEST_CASE("asking for NCCL without a GPU, or bad ranks, gives a clear error", "[collective]") {
  redis();
  auto s = spec_for("nccl", 1, 0);
  s.backend = Backend::kNccl;
  // Where the NCCL backend is built it loads and reports the missing device; elsewhere it says
  // the backend is not available. Either way: a CollectiveError naming the group, not a crash.
  CHECK_THROWS_WITH(create_group(s), Catch::Contains("group 'nccl'") &&
                                         (Catch::Contains("no CUDA device") || Catch::Contains("not available")));
  s.backend = Backend::kAuto;
  s.on_gpu = true;
  CHECK_THROWS_AS(create_group(s), CollectiveError);
  auto bad = spec_for("badrank", 2, 5);
  CHECK_THROWS_WITH(create_group(bad), Catch::Contains("outside world size"));
}

namespace {
// Starts `world` coll_rank processes; returns their exit codes (a killed rank: 128 + signal).
// `env_for(rank)` adds to a rank's environment; `errs_out` gets what the ranks printed.
using EnvFor = std::function<std::map<std::string, std::string>(int)>;
std::vector<int> run_processes(const std::string& name, int world, bool shm, int die_rank = -1,
                               bool expect_named = false, const EnvFor& env_for = {},
                               std::string* errs_out = nullptr) {
  std::vector<pid_t> pids;
  std::string err_file = "/tmp/yard-coll-rank-" + std::to_string(getpid()) + ".err";
  std::remove(err_file.c_str());
  for (int r = 0; r < world; ++r) {
    yard::detail::SpawnOptions so;
    so.env = {{"RANK", std::to_string(r)}, {"WORLD", std::to_string(world)}, {"REDIS", redis().address()},
              {"NAME", name}, {"SHM", shm ? "1" : "0"}};
    if (die_rank >= 0) so.env["DIE_RANK"] = std::to_string(die_rank);
    if (env_for)
      for (auto& [k, v] : env_for(r)) so.env[k] = v;
    so.death_signal = SIGKILL;
    so.stderr_path = err_file;
    pids.push_back(yard::detail::spawn({getenv("COLL_RANK_BIN")}, so));
  }
  std::vector<int> codes;
  for (auto p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  std::ifstream in(err_file);
  std::string errs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(err_file.c_str());
  if (errs_out) *errs_out = errs;
  if (expect_named) {
    // Every survivor names the group and the dead rank.
    INFO(errs);
    CHECK(errs.find("rank 0: group '" + name + "'") != std::string::npos);
    CHECK(errs.find("rank 1: group '" + name + "'") != std::string::npos);
    size_t named = 0;
    for (size_t at = errs.find("rank(s) 2 died"); at != std::string::npos; at = errs.find("rank(s) 2 died", at + 1)) ++named;
    for (size_t at = errs.find("rank 2 (pid"); at != std::string::npos; at = errs.find("rank 2 (pid", at + 1)) ++named;
    CHECK(named == 2);
  }
  return codes;
}
}  // namespace

TEST_CASE("ranks as separate processes agree element by element", "[collective][processes]") {
  redis();
  for (bool shm : {false, true})
    for (int world : {2, 3, 4}) {
      INFO("world " << world << (shm ? " shm" : " tcp"));
      auto codes = run_processes("proc-" + std::to_string(world) + (shm ? "-shm" : "-tcp"), world, shm);
      for (int c : codes) CHECK(c == 0);
    }
}

TEST_CASE("ranks on different hosts seal their traffic; a rank with another key is refused",
          "[collective][processes][sealed]") {
  redis();
  std::string key(64, 'a');
  for (int world : {2, 3}) {
    INFO("world " << world);
    std::string errs;
    auto codes = run_processes("sealed-" + std::to_string(world), world, true, -1, false, [&](int r) {
      return std::map<std::string, std::string>{
          {"YARD_HOST_ID", "host-" + std::to_string(r)}, {"LINK_KEY", key}, {"EXPECT_SEALED", "1"}};
    }, &errs);
    INFO(errs);
    for (int c : codes) CHECK(c == 0);
  }
  // On one host the same key changes nothing: shared memory, in the clear.
  auto same = run_processes("sealed-one-host", 2, true, -1, false, [&](int) {
    return std::map<std::string, std::string>{{"LINK_KEY", key}};
  });
  for (int c : same) CHECK(c == 0);
  // A rank holding another key cannot read the others' messages, nor they its own.
  std::string errs;
  auto codes = run_processes("sealed-wrong", 2, true, -1, false, [&](int r) {
    return std::map<std::string, std::string>{
        {"YARD_HOST_ID", "host-" + std::to_string(r)}, {"LINK_KEY", r == 1 ? std::string(64, 'b') : key},
        {"EXPECT_SEALED", "1"}};
  }, &errs);
  INFO(errs);
  CHECK(codes[0] == 3);
  CHECK(codes[1] == 3);
  CHECK(errs.find("failed authentication") != std::string::npos);
}

TEST_CASE("kill -9 of a rank: the others fail with CollectiveError, never hang", "[collective][processes][failure]") {
  redis();
  for (bool shm : {false, true}) {
    INFO((shm ? "shm" : "tcp"));
    auto t0 = std::chrono::steady_clock::now();
    auto codes = run_processes(std::string("killed-") + (shm ? "shm" : "tcp"), 3, shm, 2, true);
    CHECK(codes[2] == 128 + SIGKILL);
    CHECK(codes[0] == 3);
    CHECK(codes[1] == 3);
    // The TCP path notices the closed connections, the shared-memory path the dead pid: both
    // long before the 3 s operation timeout.
    CHECK(std::chrono::steady_clock::now() - t0 < 60s);
  }
}

TEST_CASE("kill -9 of a rank that another waits to receive from: the receive names it", "[collective][processes][p2p][failure]") {
  redis();
  for (bool shm : {false, true}) {
    INFO((shm ? "shm" : "tcp"));
    std::string errs;
    auto codes = run_processes(std::string("p2p-killed-") + (shm ? "shm" : "tcp"), 2, shm, 1, false, [](int) {
      return std::map<std::string, std::string>{{"RECV_FIRST", "1"}};
    }, &errs);
    INFO(errs);
    CHECK(codes[1] == 128 + SIGKILL);
    CHECK(codes[0] == 3);
    CHECK((errs.find("rank 1 (pid") != std::string::npos || errs.find("rank(s) 1 died") != std::string::npos));
  }
}

TEST_CASE("asynchronous operations complete in order and report errors through wait", "[collective]") {
  std::atomic<int> bad{0};
  run_ranks("async", 3, [&](int rank, Communicator& c) {
    std::vector<std::vector<float>> bufs(8, std::vector<float>(5000, float(rank + 1)));
    std::vector<WorkPtr> work;
    for (auto& b : bufs) work.push_back(c.allreduce_async(b.data(), b.size(), DType::kFloat32, ReduceOp::kSum));
    std::vector<float> all(3 * 100);
    std::vector<float> mine(100, float(rank));
    work.push_back(c.allgather_async(mine.data(), all.data(), 100, DType::kFloat32));
    for (auto& w : work) bad += !w->wait(30s);
    for (auto& b : bufs)
      for (float x : b) bad += x != 6.f;
    for (int q = 0; q < 3; ++q) bad += all[q * 100] != float(q);
    auto failing = c.async([](Communicator& cc) { cc.broadcast(nullptr, 1, DType::kFloat32, 99); });
    try {
      failing->wait(30s);
      ++bad;
    } catch (const CollectiveError&) {
    }
  });
  CHECK(bad == 0);
}

TEST_CASE("64 MiB messages: allreduce, broadcast, allgather on TCP and shared memory", "[collective][large]") {
  for (auto path : {Path::kTcp, Path::kShm})
    for (int world : {2, 4}) {
      std::atomic<int> bad{0};
      run_ranks("large-" + std::to_string(world), world, [&](int rank, Communicator& c) {
        const size_t n = (64u << 20) / sizeof(float);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = float(rank + (i % 13));
        c.allreduce(v.data(), n, DType::kFloat32, ReduceOp::kSum);
        for (size_t i = 0; i < n; i += 4093)
          bad += v[i] != float(world * (world - 1) / 2 + world * (i % 13));
        bad += v[n - 1] != float(world * (world - 1) / 2 + world * ((n - 1) % 13));
        std::vector<float> b(n, rank == 0 ? 3.f : 0.f);
        c.broadcast(b.data(), n, DType::kFloat32, 0);
        for (size_t i = 0; i < n; i += 4093) bad += b[i] != 3.f;
        std::vector<float> in(n / world, float(rank)), out(n);
        c.allgather(in.data(), out.data(), n / world, DType::kFloat32);
        for (int q = 0; q < world; ++q) bad += out[q * (n / world)] != float(q) || out[(q + 1) * (n / world) - 1] != float(q);
      }, path);
      INFO(path_name(path) << " world " << world);
      CHECK(bad == 0);
    }
}
