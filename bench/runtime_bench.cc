// bench/run runtime: the runtime microbenchmarks, named after Ray's so the figures compare.
// One JSON object per line: {"suite","case","value","unit"[,"peer","peer_value","ratio"]}.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>
#include <fstream>

#include <zmq.hpp>

#include "bench_util.h"
#include "handoff_peer.h"
#include "yard/process.h"
#include "yard/yard.h"

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

int noop(int x) { return x; }
std::vector<uint8_t> make_bytes(int mb) { return std::vector<uint8_t>(size_t(mb) << 20, 7); }
// Reads one element of every page of its argument (the call's cost, not a loop's, is measured).
double sum_floats(std::vector<float> v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); i += 1024) s += v[i];
  return s;
}
// Holds a CPU until `release` exists (after writing `started`): the driver's queue fills behind it.
int hold_cpu(std::string started, std::string release) {
  std::ofstream(started) << "1";
  auto t0 = Clock::now();
  while (!std::filesystem::exists(release) && Clock::now() - t0 < std::chrono::seconds(600))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return 0;
}
// The same, reading the argument in place.
double sum_view(yard::ArrayView<float> v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); i += 1024) s += v[i];
  return s;
}
YARD_REMOTE(noop, make_bytes, sum_floats, hold_cpu, sum_view);

class Echo {
 public:
  Echo() = default;
  int echo(int x) { return x; }
};
YARD_ACTOR(Echo, yard::ctor<>, &Echo::echo);

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Both sides' process settings, in every record with a peer: the ZeroMQ peers are this binary
// with this environment (the same libzmq, no runtime); the memcpy peer runs in this process, after
// yard::init() set the allocator as for every Switchyard process (jemalloc, freed memory kept
// unless YARD_MALLOC_RETAIN=0), on buffers touched before it is timed.
const char* kSettings =
    "{\"peer_process\":\"this binary, this environment\",\"allocator\":\"jemalloc, both sides\","
    "\"malloc_retain\":\"as yard::init() sets it, both sides\",\"threads\":\"one caller thread each side\"}";

void emit(const char* name, double value, const char* unit, const char* peer = nullptr, double peer_value = 0) {
  if (peer)
    std::printf("{\"suite\":\"runtime\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"peer\":\"%s\",\"peer_value\":%.6g,\"ratio\":%.4g,\"settings\":%s}\n",
                name, value, unit, peer, peer_value, value / peer_value, kSettings);
  else
    std::printf("{\"suite\":\"runtime\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\"}\n", name, value, unit);
  std::fflush(stdout);
}

// Runs `op` in rounds for about `budget`, returns operations per second.
template <class F>
double rate(F op, int per_round, double budget = 2.0) {
  for (int i = 0; i < 2; ++i) op();  // warm-up
  auto t0 = Clock::now();
  long ops = 0;
  while (seconds_since(t0) < budget) {
    op();
    ops += per_round;
  }
  return ops / seconds_since(t0);
}

// The peer for the sync cases: a raw ZeroMQ REQ/REP round trip between two processes on loopback.
void zmq_rep_server(int port) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::rep);
  s.bind("tcp://127.0.0.1:" + std::to_string(port));
  for (;;) {
    zmq::message_t m;
    if (!s.recv(m)) break;
    s.send(m, zmq::send_flags::none);
  }
}

// This binary again as a peer's server (main() looks at `role`); returns its pid and port.
std::pair<pid_t, int> start_peer_server(const char* role) {
  int port = yard::sys::free_port("127.0.0.1");
  yard::sys::SpawnOptions so;
  so.env[role] = std::to_string(port);
  so.death_signal = SIGKILL;
  return {yard::sys::spawn({yard::sys::self_exe()}, so), port};
}

double zmq_round_trips() {
  auto [pid, port] = start_peer_server("BENCH_ZMQ_REP");
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.connect("tcp://127.0.0.1:" + std::to_string(port));
  char payload[64] = {0};
  double r = rate([&] {
    for (int i = 0; i < 100; ++i) {
      s.send(zmq::buffer(payload, sizeof payload), zmq::send_flags::none);
      zmq::message_t m;
      (void)s.recv(m);
    }
  }, 100);
  kill(pid, SIGKILL);
  yard::sys::terminate(pid, SIGKILL, 1s);
  return r;
}

// The peer for the async cases: raw ZeroMQ DEALER → ROUTER between two processes on loopback,
// 64-byte requests with `in_flight` outstanding (the async cases submit 1,000, then wait for all),
// echoed back by the ROUTER. What the transport alone does with the same pipelining.
void zmq_router_echo(int port) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:" + std::to_string(port));
  for (;;) {
    zmq::message_t id, m;
    if (!s.recv(id) || !s.recv(m)) break;
    s.send(id, zmq::send_flags::sndmore);
    s.send(m, zmq::send_flags::none);
  }
}

double zmq_pipelined(int in_flight) {
  auto [pid, port] = start_peer_server("BENCH_ZMQ_ROUTER");
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.connect("tcp://127.0.0.1:" + std::to_string(port));
  char payload[64] = {0};
  double r = rate([&] {
    for (int i = 0; i < in_flight; ++i) s.send(zmq::buffer(payload, sizeof payload), zmq::send_flags::none);
    for (int i = 0; i < in_flight; ++i) {
      zmq::message_t m;
      (void)s.recv(m);
    }
  }, in_flight, 3.0);
  kill(pid, SIGKILL);
  yard::sys::terminate(pid, SIGKILL, 1s);
  return r;
}

// One driver queues `n` small tasks while every CPU is held: the heap it takes per queued task
// (ObjectRefs, the runtime's records, arguments), then the rate at which all n complete.
void queued_tasks(size_t n) {
  auto dir = std::filesystem::temp_directory_path() / ("yard-queue-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<yard::ObjectRef<int>> holds;
  int cpus = 2;
  for (int i = 0; i < cpus; ++i)
    holds.push_back(yard::task(hold_cpu).remote((dir / ("started" + std::to_string(i))).string(), (dir / "release").string()));
  for (int i = 0; i < cpus; ++i)
    while (!std::filesystem::exists(dir / ("started" + std::to_string(i)))) std::this_thread::sleep_for(1ms);
  std::vector<yard::ObjectRef<int>> refs;
  refs.reserve(n);
  yard::sys::release_free_heap();
  size_t before = yard::sys::heap_bytes_in_use();
  auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) refs.push_back(yard::task(noop).remote(int(i)));
  size_t after = yard::sys::heap_bytes_in_use();
  emit("driver_bytes_per_queued_task", double(after - before) / double(n), "bytes");
  std::ofstream(dir / "release") << "1";
  yard::get(holds);
  for (size_t i = 0; i < n; i += n / 10) if (*refs[i].get() != int(i)) std::abort();
  yard::get(refs);
  emit("tasks_1M_per_s", double(n) / seconds_since(t0), "tasks/s");
  std::filesystem::remove_all(dir);
}

// 1,000 small tasks submitted, then all awaited; the same with calls to one actor.
void task_round() {
  std::vector<yard::ObjectRef<int>> refs;
  refs.reserve(1000);
  for (int i = 0; i < 1000; ++i) refs.push_back(yard::task(noop).remote(i));
  yard::get(refs);
}
void actor_round(yard::ActorHandle<Echo>& a) {
  std::vector<yard::ObjectRef<int>> refs;
  refs.reserve(1000);
  for (int i = 0; i < 1000; ++i) refs.push_back(a.call(&Echo::echo).remote(i));
  yard::get(refs);
}

// Rounds of the above for 3 s; ops/s.
// BENCH_ROUNDS=N instead runs exactly N rounds after the warm-up (for counting instructions per
// call, under callgrind: two counts N apart, divided by 1000 N).
double async_rate(bool actor) {
  const char* fixed = getenv("BENCH_ROUNDS");
  auto a = actor ? yard::actor<Echo>().remote() : yard::ActorHandle<Echo>();
  if (actor) a.call(&Echo::echo).remote(0).get();
  auto round = [&] { actor ? actor_round(a) : task_round(); };
  if (!fixed) return rate(round, 1000, 3.0);
  int rounds = std::atoi(fixed);
  round();
  auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) round();
  return rounds * 1000 / seconds_since(t0);
}

// The same case in a child of this binary with its own embedded cluster, metrics recording on
// or off (YARD_METRICS, which the cluster's workers inherit).
double child_rate(bool actor, bool metrics) {
  auto out = std::filesystem::temp_directory_path() / ("yard-bench-rate-" + std::to_string(getpid()));
  yard::sys::SpawnOptions so;
  so.env = {{"BENCH_RATE", actor ? "actor" : "task"}, {"YARD_METRICS", metrics ? "1" : "0"}, {"YARD_ADDRESS", ""}};
  so.stdout_path = out.string();
  pid_t pid = yard::sys::spawn({yard::sys::self_exe()}, so);
  int status = 0;
  waitpid(pid, &status, 0);
  double r = 0;
  std::ifstream(out) >> r;
  std::filesystem::remove(out);
  if (r <= 0) std::fprintf(stderr, "the metrics-%s run failed\n", metrics ? "on" : "off");
  return r;
}

// Metrics on against off, each in a child with a cluster of its own (the same start, the same one
// actor), alternating seven times; the medians. (The machine's noise between runs, ±10%, is
// larger than the cost measured: seven pairs bring the medians' noise under it.)
void metrics_cost(const char* name, bool actor, const char* base) {
  std::vector<double> on, off;
  for (int i = 0; i < 7; ++i) {
    off.push_back(child_rate(actor, false));
    on.push_back(child_rate(actor, true));
  }
  std::sort(on.begin(), on.end());
  std::sort(off.begin(), off.end());
  emit(name, on[3], "ops/s", (std::string(base) + "_metrics_off").c_str(), off[3]);
}

}  // namespace

namespace {

// Which cases run: all, or the one named on the command line.
struct Want {
  std::string only;
  bool operator()(const char* c) const { return only.empty() || only == c; }
};

// Each peer is measured right before and right after the case it is compared with, and its
// figure is the mean of the two: this machine's speed drifts (by 2x within minutes on a shared
// VM), and a figure from another moment would not compare.
template <class Peer, class Ours>
std::pair<double, double> bracketed(Peer peer, Ours ours) {
  double before = peer();
  double value = ours();
  return std::pair{value, (before + peer()) / 2};
}

// A peer server role this process plays when started as one (the benches start themselves so);
// true when it did.
bool serve_peer_role() {
  if (const char* p = getenv("BENCH_ZMQ_REP")) {
    zmq_rep_server(std::atoi(p));
  } else if (const char* p = getenv("BENCH_ZMQ_ROUTER")) {
    zmq_router_echo(std::atoi(p));
  } else if (const char* p = getenv("BENCH_HANDOFF_ROUTER")) {
    bench::handoff_server(std::atoi(p));
  } else if (const char* p = getenv("BENCH_PORT_ROUTER")) {
    bench::handoff_server(std::atoi(p), true);
  } else {
    return false;
  }
  return true;
}

// Tasks and actor calls, one at a time and 1,000 in flight, against raw ZeroMQ.
void call_cases(const Want& want) {
  if (want("tasks_sync")) {
    auto [value, peer] = bracketed(zmq_round_trips, [] { return rate([] { yard::task(noop).remote(1).get(); }, 1); });
    emit("tasks_sync", value, "ops/s", "zmq_req_rep_roundtrip", peer);
  }
  if (want("tasks_async")) {
    auto [value, peer] = bracketed([] { return zmq_pipelined(1000); }, [] { return rate(task_round, 1000, 3.0); });
    emit("tasks_async", value, "ops/s", "zmq_dealer_router_1000_in_flight", peer);
  }
  if (want("tasks_async_metrics_on")) metrics_cost("tasks_async_metrics_on", false, "tasks_async");
  if (want("actor_calls_async_metrics_on")) metrics_cost("actor_calls_async_metrics_on", true, "actor_calls_async");
  auto a = yard::actor<Echo>().remote();
  a.call(&Echo::echo).remote(0).get();
  if (want("actor_calls_sync")) {
    auto [value, peer] =
        bracketed(zmq_round_trips, [&] { return rate([&] { a.call(&Echo::echo).remote(1).get(); }, 1); });
    emit("actor_calls_sync", value, "ops/s", "zmq_req_rep_roundtrip", peer);
  }
  if (want("actor_calls_async")) {
    auto [value, peer] =
        bracketed([] { return zmq_pipelined(1000); }, [&] { return rate([&] { actor_round(a); }, 1000, 3.0); });
    emit("actor_calls_async", value, "ops/s", "zmq_dealer_router_1000_in_flight", peer);
  }
}

// The async cases' structure (threads and hand-offs, handoff_peer.h) with no work in it, against
// the same raw peer: how much of the transport the structure alone leaves. handoff: a task's path
// (the worker's loop hands each call to its executor); port: an actor's since the call port (the
// worker answers on the thread that owns its socket).
void structure_cases(const Want& want) {
  for (auto [name, role] : {std::pair{"handoff_structure_async", "BENCH_HANDOFF_ROUTER"},
                            std::pair{"port_structure_async", "BENCH_PORT_ROUTER"}}) {
    if (!want(name)) continue;
    auto [value, peer] = bracketed([] { return zmq_pipelined(1000); }, [role = role] {
      auto [pid, port] = start_peer_server(role);
      double r = bench::handoff_pipelined(port, 1000, 3.0);
      yard::sys::terminate(pid, SIGKILL, 1s);
      return r;
    });
    emit(name, value, "ops/s", "zmq_dealer_router_1000_in_flight", peer);
  }
}

// A concurrent actor, and n caller threads each with its own actor (n = 2, the machine's cores).
void concurrent_cases(const Want& want) {
  // The same load on 16 fibers, then on 16 threads (Ray's max_concurrency), against the fibers.
  double fibers = 0;
  if (want("actor_calls_concurrent") || want("actor_calls_threaded")) {
    auto c = yard::actor<Echo>().max_concurrency(16, yard::Concurrency::kFibers).remote();
    c.call(&Echo::echo).remote(0).get();
    fibers = rate([&] { actor_round(c); }, 1000, 3.0);
    if (want("actor_calls_concurrent")) emit("actor_calls_concurrent", fibers, "ops/s");
  }
  if (want("actor_calls_threaded")) {
    auto t = yard::actor<Echo>().max_concurrency(16).remote();
    t.call(&Echo::echo).remote(0).get();
    emit("actor_calls_threaded", rate([&] { actor_round(t); }, 1000, 3.0), "ops/s", "actor_calls_concurrent", fibers);
  }
  if (!want("n_n_actor_calls_async")) return;
  const int n = 2;
  std::vector<yard::ActorHandle<Echo>> actors;
  for (int i = 0; i < n; ++i) {
    actors.push_back(yard::actor<Echo>().remote());
    actors.back().call(&Echo::echo).remote(0).get();
  }
  std::atomic<long> total{0};
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      while (seconds_since(t0) < 3.0) {
        std::vector<yard::ObjectRef<int>> refs;
        for (int k = 0; k < 1000; ++k) refs.push_back(actors[i].call(&Echo::echo).remote(k));
        yard::get(refs);
        total += 1000;
      }
    });
  for (auto& t : ts) t.join();
  emit("n_n_actor_calls_async", total / seconds_since(t0), "ops/s");
}

// The best of five of `once` (seconds for 100 MB), as GB/s against memcpy.
template <class Once>
void gbps_case(const char* name, Once once) {
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, (100u << 20) / once() / 1e9);
  emit(name, best, "GB/s", "memcpy", yard::bench::memcpy_gbps(100u << 20));
}

// A 100 MB argument to a task on the same node: bytes per second of the whole call (the worker
// reads one element of every page; their sum is the answer), as a value and as an ObjectRef put
// before the timed call; and the same two with the task taking a yard::ArrayView<float> (read in
// place, no decode copy).
void arg_cases(const Want& want) {
  const size_t nfloats = (100u << 20) / sizeof(float);
  const double expect = double(nfloats / 1024) * 0.5;
  auto arg_case = [&](const char* name, auto call) {
    gbps_case(name, [&] {
      auto t0 = Clock::now();
      double got = call();
      double s = seconds_since(t0);
      if (got != expect) std::abort();
      return s;
    });
  };
  if (want("task_arg_100MB")) {
    std::vector<float> v(nfloats, 0.5f);
    arg_case("task_arg_100MB", [&] { return *yard::task(sum_floats).remote(v).get(); });
  }
  if (want("ref_arg_100MB")) {
    auto ref = yard::put(std::vector<float>(nfloats, 0.5f));
    arg_case("ref_arg_100MB", [&] { return *yard::task(sum_floats).remote(ref).get(); });
  }
  if (want("task_arg_100MB_view")) {
    std::vector<float> v(nfloats, 0.5f);
    arg_case("task_arg_100MB_view", [&] { return *yard::task(sum_view).remote(v).get(); });
  }
  if (want("ref_arg_100MB_view")) {
    auto ref = yard::put(std::vector<float>(nfloats, 0.5f));
    arg_case("ref_arg_100MB_view", [&] { return *yard::task(sum_view).remote(ref).get(); });
  }
}

// Objects: put and get calls, and 100 MB through put/get, a task's result and a task's argument.
void object_cases(const Want& want) {
  if (want("put_calls"))
    emit("put_calls", rate([] {
      for (int i = 0; i < 1000; ++i) (void)yard::put(i);
    }, 1000), "ops/s");
  if (want("get_calls")) {
    auto r = yard::put(std::string(64, 'x'));
    emit("get_calls", rate([&] {
      for (int i = 0; i < 1000; ++i) (void)r.get();
    }, 1000), "ops/s");
  }
  const size_t bytes = 100u << 20;
  if (want("put_get_100MB"))
    gbps_case("put_get_100MB", [&] {
      std::vector<uint8_t> big(bytes, 7);
      auto t0 = Clock::now();
      auto r = yard::put(std::move(big));  // moved in; get() makes the one copy
      auto back = r.get();
      double s = seconds_since(t0);
      if ((*back)[bytes - 1] != 7) std::abort();
      return s;
    });
  // A worker's 100 MB result read by the driver on the same node: bytes per second of the whole
  // call, the value's creation on the worker included.
  if (want("task_return_100MB"))
    gbps_case("task_return_100MB", [&] {
      auto t0 = Clock::now();
      auto r = yard::task(make_bytes).remote(100).get();
      double s = seconds_since(t0);
      if ((*r)[bytes - 1] != 7) std::abort();
      return s;
    });
  arg_cases(want);
}

}  // namespace

int main(int argc, char** argv) {
  if (serve_peer_role()) return 0;
  yard::init(argc, argv);
  if (const char* c = getenv("BENCH_RATE")) {
    std::printf("%f\n", async_rate(std::string(c) == "actor"));
    return 0;
  }
  Want want{argc > 1 ? argv[1] : ""};
  call_cases(want);
  structure_cases(want);
  concurrent_cases(want);
  if (want("driver_bytes_per_queued_task") || want("tasks_1M_per_s")) queued_tasks(1000000);
  object_cases(want);
  return 0;
}
