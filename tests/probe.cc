// A helper program for the CLI tests.
//   probe embedded   starts an embedded cluster, prints "ready <address>", then waits to be killed
//   probe actor      joins YARD_ADDRESS, starts a named actor, prints "ready", waits for stdin EOF
//   probe remote N   joins YARD_ADDRESS, starts a restartable actor on node N, prints "on <node>",
//                    waits for a line on stdin, calls it again and prints "now <node>"
//   probe workdir N  prints data.txt of its working directory, and what an actor on node N reads
//                    from its own
//   probe detach N   starts a detached actor named N, calls it once and exits
//   probe use N      finds the actor named N (made by another job) and calls it
//   probe leave DIR  starts a long task and a long actor call, and exits once both have started
//   probe big N      sends a 100 MB value and a 100 MB ref to an actor on node N, gets a 100 MB
//                    object back from it, and prints "intact K" (K of 3 arrived intact)
//   probe share N    an actor on node N makes a 100 MB object; an actor here fetches and keeps
//                    it; the maker is killed; a second actor here still gets it (from the first,
//                    not from the dead owner). Prints "announced 1", "shared 1", "withdrawn 1"
//   probe parts N    an actor on node N (another host) makes objects of sizes around the transfer's
//                    part size, with a pattern that shows a misplaced part, and returns such values
//                    from calls; prints "intact K of M",
//                    then kills that actor and prints "lost <what the get said>"
//   probe echo N S   an actor on node N returns S twice over; prints what came back
//   probe echo N S B an actor on node N returns B bytes of S repeated; prints "intact" or "broken"
//   probe ring N M S a two-rank collective group of actors on nodes N and M: allreduces and a
//                    broadcast of the mark S; prints each rank's verdict ("ok sealed", ...)
//   probe raw ADDR   a plain ZeroMQ client (no keys, no token) sends a request to ADDR and prints
//                    "reply" if anything comes back within 3 s, else "silence"
//   probe churn F    until file F exists: rounds of a placement group, an actor in it, a call, a
//                    task, the actor killed and the group removed; prints "round K" after each,
//                    "failed K: why" for a round that failed, and "done K failed M" at the end
//   probe ledger F   until file F exists: writes key i of this job's rendezvous store (the control
//                    store: each write returns once a replica has it); then reads every key back
//                    and prints "wrote K missing M"
//   probe spill N    puts N objects of 16 MB, prints "put", waits for a line on stdin, then reads
//                    each back (and one through a task) and prints "intact K"
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <zmq.h>

#include "yard/collective.h"
#include "yard/job_store.h"
#include "yard/yard.h"

long sample_sum(std::vector<uint8_t> v);

// Marks that it started, then takes a long time.
int nap(std::string mark) {
  std::ofstream(mark) << "started\n";
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 1;
}
// The sum of every 4096th byte of a value (a task that reads its argument).
long sample_sum(std::vector<uint8_t> v) {
  long s = 0;
  for (size_t i = 0; i < v.size(); i += 4096) s += v[i];
  return s;
}
// A task that also reports a user metric (a counter tagged by parity, a gauge, a histogram).
int twice(int x) {
  static yard::metrics::Counter seen("probe_values_total", "values doubled", {"parity"});
  static yard::metrics::Histogram size("probe_value", "values doubled", {10, 100});
  seen.inc(1, {{"parity", x % 2 ? "odd" : "even"}});
  size.observe(x);
  return 2 * x;
}
int my_pid() { return int(getpid()); }
// A variable of this process's environment, and where it runs.
std::string env_here(std::string name) {
  const char* v = getenv(name.c_str());
  return std::string(v ? v : "<unset>") + " in " + std::filesystem::current_path().string();
}
YARD_REMOTE(nap, sample_sum, twice, my_pid, env_here);

struct Pid {
  int pid() { return int(getpid()); }
  // An object this actor owns: whoever gets it fetches it from here.
  yard::ObjectRef<std::vector<uint8_t>> stash(int bytes) { return yard::put(std::vector<uint8_t>(size_t(bytes), 7)); }
};
YARD_ACTOR(Pid, &Pid::pid, &Pid::stash);

std::vector<uint8_t> make_pattern(int64_t bytes, int seed) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t((i * 7 + i / 4096 + size_t(seed)) % 251);
  return v;
}

class Holder {
 public:
  Holder() = default;
  int ping() { return 1; }
  std::string where() { return yard::node_id(); }
  int nap(std::string mark) { return ::nap(mark); }
  long sample(std::vector<uint8_t> v) {
    long whole = v.size() == (100u << 20);
    return ::sample_sum(std::move(v)) + whole;
  }
  yard::ObjectRef<std::vector<uint8_t>> make(int fill) { return yard::put(std::vector<uint8_t>(100u << 20, uint8_t(fill))); }
  // Keeps the ref (inside a vector: a ref as a direct argument is passed as its value) and reads
  // it: 1 when it is 100 MB of `fill`.
  int hold(std::vector<yard::ObjectRef<std::vector<uint8_t>>> rs, int fill) {
    auto r = rs.at(0);
    kept_ = r;
    auto v = r.get(std::chrono::seconds(60));
    return v->size() == (100u << 20) && v->front() == fill && v->back() == fill;
  }
  std::string echo(std::string s) { return s + s; }
  std::string repeat(std::string s, int64_t bytes) {
    std::string out;
    out.reserve(size_t(bytes) + s.size());
    while (int64_t(out.size()) < bytes) out += s;
    out.resize(size_t(bytes));
    return out;
  }
  std::vector<uint8_t> pattern_value(int64_t bytes, int seed) { return make_pattern(bytes, seed); }
  // An object whose every byte depends on its position.
  yard::ObjectRef<std::vector<uint8_t>> pattern(int64_t bytes, int seed) { return yard::put(make_pattern(bytes, seed)); }
  int drop() {
    kept_ = {};
    return 1;
  }
  std::string env(std::string name) { return env_here(std::move(name)); }
  std::string read(std::string file) {
    std::ifstream f(file);
    std::string s;
    std::getline(f, s);
    return f ? s : "<no " + file + " in " + std::filesystem::current_path().string() + ">";
  }

 private:
  yard::ObjectRef<std::vector<uint8_t>> kept_;
};
YARD_ACTOR(Holder, &Holder::ping, &Holder::where, &Holder::read, &Holder::nap, &Holder::sample, &Holder::make,
           &Holder::hold, &Holder::drop, &Holder::pattern, &Holder::echo,
           &Holder::pattern_value, &Holder::repeat, &Holder::env);

// One rank of a two-rank collective group of the cluster: an allreduce (max) of 5 MB of `mark`
// over and over, an allreduce (sum) of doubles and a broadcast of `mark` from rank 1. Returns
// "ok sealed", "ok in clear", or what went wrong.
std::string ring_rank(int rank, std::string mark) {
  using namespace yard::collective;
  auto c = create_group(cluster_group("probe-ring", 2, rank, "0"));
  std::vector<uint8_t> m(5u << 20);
  for (size_t i = 0; i < m.size(); ++i) m[i] = uint8_t(mark[i % mark.size()]);
  auto v = m;
  c->allreduce(v.data(), v.size(), DType::kUInt8, ReduceOp::kMax);
  std::vector<double> d(100000, rank + 1.0);
  c->allreduce(d.data(), d.size(), DType::kFloat64, ReduceOp::kSum);
  std::vector<uint8_t> b(m.size(), 0);
  if (rank == 1) b = m;
  c->broadcast(b.data(), b.size(), DType::kUInt8, 1);
  bool sealed = c->encrypts_traffic();
  c->destroy();
  if (v != m) return "the allreduce of the mark came back wrong";
  if (d.front() != 3.0 || d.back() != 3.0) return "the allreduce of doubles came back wrong";
  if (b != m) return "the broadcast came back wrong";
  return sealed ? "ok sealed" : "ok in clear";
}
class Ranker {
 public:
  std::string ring(int rank, std::string mark) { return ring_rank(rank, std::move(mark)); }
};
YARD_ACTOR(Ranker, &Ranker::ring);

// A task, an actor and a placement group each asking for one `res` (which no node may have yet),
// with `timeout_ms` as infeasible_timeout (0: none): each outcome printed as it comes ("task ok",
// "actor infeasible: ...", "group ok"); the group is waited for up to 120 s.
int infeasible(const std::string& res, long timeout_ms) {
  auto within = timeout_ms > 0 ? yard::Duration(timeout_ms) : yard::kForever;
  auto say = [](const char* what, const std::function<void()>& f) {
    try {
      f();
      std::printf("%s ok\n", what);
    } catch (const yard::InfeasibleError& e) {
      std::printf("%s infeasible: %s\n", what, e.what());
    } catch (const std::exception& e) {
      std::printf("%s failed: %s\n", what, e.what());
    }
    std::fflush(stdout);
  };
  auto t = yard::task(twice).resources({{res, 1}}).infeasible_timeout(within).remote(21);
  auto a = yard::actor<Holder>().resources({{res, 1}}).infeasible_timeout(within).remote();
  std::optional<yard::PlacementGroup> g;
  say("creating the group", [&] { g = yard::placement_group({{{res, 1}}}); });
  std::printf("asked\n");
  std::fflush(stdout);
  say("task", [&] {
    if (*t.get(std::chrono::seconds(120)) != 42) throw std::runtime_error("wrong result");
  });
  say("actor", [&] {
    if (*a.call(&Holder::ping).remote().get(std::chrono::seconds(120)) != 1) throw std::runtime_error("wrong result");
  });
  if (g) say("group", [&] {
    if (!g->wait(std::chrono::seconds(timeout_ms > 0 ? 1 : 120))) throw std::runtime_error("not placed");
    g->remove();
  });
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "raw") {  // before init: this one is not a cluster client
    void* ctx = zmq_ctx_new();
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(s, (std::string("tcp://") + argv[2]).c_str());
    std::string junk = "a request from a client without the cluster's keys";
    zmq_send(s, junk.data(), junk.size(), ZMQ_DONTWAIT);
    zmq_pollitem_t item{s, 0, ZMQ_POLLIN, 0};
    std::printf("%s\n", zmq_poll(&item, 1, 3000) > 0 ? "reply" : "silence");
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
  }
  try {
    yard::init(argc, argv);
  } catch (const yard::Error& e) {
    std::printf("init: %s\n", e.what());
    return 5;
  }
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "embedded") {
    std::printf("ready %s\n", yard::cluster_address().c_str());
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "actor") {
    auto h = yard::actor<Holder>().name("probe-holder").remote();
    if (*h.call(&Holder::ping).remote().get(std::chrono::seconds(30)) != 1) return 1;
    std::printf("ready\n");
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    return *h.call(&Holder::ping).remote().get(std::chrono::seconds(30)) == 1 ? 0 : 3;
  }
  if (mode == "leave" && argc > 2) {
    std::string dir = argv[2];
    auto t = yard::task(nap).remote(dir + "/task");
    auto h = yard::actor<Holder>().remote();
    auto c = h.call(&Holder::nap).remote(dir + "/call");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(std::filesystem::exists(dir + "/task") && std::filesystem::exists(dir + "/call")))
      if (std::chrono::steady_clock::now() > deadline) return 2;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::printf("both started\n");
    return 0;  // with both still running
  }
  if (mode == "big" && argc > 2) {
    auto h = yard::actor<Holder>().node_affinity(argv[2]).remote();
    std::vector<uint8_t> v(100u << 20, 3);
    long want = long(v.size() / 4096) * 3 + 1;
    int intact = *h.call(&Holder::sample).remote(v).get(std::chrono::seconds(120)) == want;
    intact += *h.call(&Holder::sample).remote(yard::put(v)).get(std::chrono::seconds(120)) == want;
    auto back = h.call(&Holder::make).remote(9).get(std::chrono::seconds(120))->get(std::chrono::seconds(120));
    intact += back->size() == (100u << 20) && back->front() == 9 && back->back() == 9;
    std::printf("intact %d\n", intact);
    return 0;
  }
  if (mode == "share" && argc > 2) {
    auto wait = std::chrono::seconds(120);
    auto maker = yard::actor<Holder>().node_affinity(argv[2]).remote();
    auto ref = *maker.call(&Holder::make).remote(4).get(wait);
    auto a = yard::actor<Holder>().remote(), b = yard::actor<Holder>().remote();
    if (*a.call(&Holder::hold).remote(std::vector{ref}, 4).get(wait) != 1) return 2;
    std::string mark = "/dev/shm/yard-have-" + ref.id();
    std::printf("announced %d\n", int(std::filesystem::exists(mark)));
    maker.kill();
    try {
      maker.call(&Holder::ping).remote().get(wait);
      return 3;
    } catch (const yard::ActorDied&) {  // the owner is gone
    }
    int shared = 0;
    try {
      shared = *b.call(&Holder::hold).remote(std::vector{ref}, 4).get(wait);
    } catch (const yard::Error& e) {
      std::printf("second fetch: %s\n", e.what());
    }
    std::printf("shared %d\n", shared);
    a.call(&Holder::drop).remote().get(wait);
    std::printf("withdrawn %d\n", int(!std::filesystem::exists(mark)));
    return 0;
  }
  if (mode == "parts" && argc > 2) {
    auto wait = std::chrono::seconds(120);
    auto far = yard::actor<Holder>().node_affinity(argv[2]).remote();
    const int64_t part = 4 << 20;
    std::vector<int64_t> sizes{1, (100 << 10) - 1, part - 1, part, part + 1, 3 * part + 7, 7 * part + 4093, 40 << 20};
    int intact = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto ref = *far.call(&Holder::pattern).remote(sizes[i], int(i)).get(wait);
      intact += *ref.get(wait) == make_pattern(sizes[i], int(i));
    }
    // Large results returned straight from a call are held there and fetched in parts too.
    for (int64_t n : {2 * part - 1, 2 * part, 2 * part + 1, int64_t(40 << 20) + 3}) {
      sizes.push_back(n);
      intact += *far.call(&Holder::pattern_value).remote(n, int(n % 7)).get(wait) == make_pattern(n, int(n % 7));
    }
    std::printf("intact %d of %zu\n", intact, sizes.size());
    auto orphan = *far.call(&Holder::pattern).remote(int64_t(20) << 20, 1).get(wait);
    far.kill();
    try {
      for (;;) far.call(&Holder::ping).remote().get(wait);
    } catch (const yard::ActorDied&) {
    }
    try {
      orphan.get(wait);
      std::printf("lost nothing: the object of a dead owner was read\n");
    } catch (const yard::OwnerDied& e) {
      std::printf("lost %s (id %s)\n", e.what(), orphan.id().c_str());
    }
    return 0;
  }
  if (mode == "ring" && argc > 4) {
    auto a = yard::actor<Ranker>().node_affinity(argv[2]).remote();
    auto b = yard::actor<Ranker>().node_affinity(argv[3]).remote();
    auto ra = a.call(&Ranker::ring).remote(0, std::string(argv[4]));
    auto rb = b.call(&Ranker::ring).remote(1, std::string(argv[4]));
    std::printf("%s\n%s\n", ra.get(std::chrono::seconds(60))->c_str(), rb.get(std::chrono::seconds(60))->c_str());
    return 0;
  }
  if (mode == "echo" && argc > 4) {  // a large value of the mark, returned from the other host
    auto h = yard::actor<Holder>().node_affinity(argv[2]).remote();
    int64_t bytes = std::atoll(argv[4]);
    std::string want(argv[3]);
    auto got = h.call(&Holder::repeat).remote(want, bytes).get(std::chrono::seconds(120));
    bool intact = int64_t(got->size()) == bytes;
    for (size_t i = 0; intact && i < got->size(); i += want.size())
      intact = got->compare(i, want.size(), want, 0, std::min(want.size(), got->size() - i)) == 0;
    std::printf("%s\n", intact ? "intact" : "broken");
    return 0;
  }
  if (mode == "echo" && argc > 3) {
    auto h = yard::actor<Holder>().node_affinity(argv[2]).remote();
    std::printf("%s\n", h.call(&Holder::echo).remote(std::string(argv[3])).get(std::chrono::seconds(60))->c_str());
    return 0;
  }
  if (mode == "spill" && argc > 2) {
    int n = std::atoi(argv[2]);
    std::vector<yard::ObjectRef<std::vector<uint8_t>>> refs;
    for (int i = 0; i < n; ++i) refs.push_back(yard::put(std::vector<uint8_t>(16u << 20, uint8_t(i + 1))));
    std::printf("put\n");
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    int intact = 0;
    for (int i = 0; i < n; ++i) {
      auto v = refs[i].get(std::chrono::seconds(60));
      intact += v->size() == (16u << 20) && v->front() == i + 1 && v->back() == i + 1;
    }
    long want = long(16u << 20) / 4096;  // the first object's bytes are all 1
    bool task_ok = *yard::task(sample_sum).remote(refs[0]).get(std::chrono::seconds(60)) == want;
    std::printf("intact %d%s\n", intact, task_ok ? "" : " (the task read a wrong value)");
    return 0;
  }
  if (mode == "tasks" && argc > 2) {
    std::vector<yard::ObjectRef<int>> refs;
    for (int i = 0; i < std::atoi(argv[2]); ++i) refs.push_back(yard::task(twice).remote(i));
    long sum = 0;
    for (auto& v : yard::get(refs, std::chrono::seconds(60))) sum += *v;
    std::printf("sum %ld\n", sum);
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);  // the job (and its workers) stay until stdin closes
    return 0;
  }
  if (mode == "timeline") {  // 100 tasks and a call to each of 3 actors: which process ran each
    std::vector<yard::ObjectRef<int>> refs;
    for (int i = 0; i < 100; ++i) refs.push_back(yard::task(my_pid).remote());
    std::printf("tasks");
    for (auto& p : yard::get(refs, std::chrono::seconds(60))) std::printf(" %d", *p);
    std::printf("\nactors");
    std::vector<yard::ActorHandle<Pid>> actors;
    for (int i = 0; i < 3; ++i) {
      actors.push_back(yard::actor<Pid>().remote());
      std::printf(" %d", *actors.back().call(&Pid::pid).remote().get(std::chrono::seconds(60)));
    }
    // One object fetched by the driver from the actor that owns it: a transfer on the timeline.
    auto ref = *actors[0].call(&Pid::stash).remote(1 << 20).get(std::chrono::seconds(60));
    std::printf("\ndriver %d %zu\n", int(getpid()), ref.get(std::chrono::seconds(60))->size());
    // A task with a name of its own: its span has that name.
    std::printf("named %d\n", *yard::task(my_pid).name("named-task").remote().get(std::chrono::seconds(60)));
    return 0;
  }
  if (mode == "train" && argc > 2) {  // a job that reports a loss, holds an actor, and waits for a file
    static yard::metrics::Gauge loss("probe_train_loss", "training loss", {"rank"});
    auto h = yard::actor<Holder>().name("probe-trainer").remote();
    if (*h.call(&Holder::ping).remote().get(std::chrono::seconds(60)) != 1) return 1;
    for (int i = 0; i < 30; ++i) {
      loss.set(1.0 / (i + 1), {{"rank", "0"}});
      std::printf("step %d\n", i);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("trained\n");
    std::fflush(stdout);
    while (!std::filesystem::exists(argv[2])) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return 0;
  }
  if (mode == "detach" && argc > 2) {
    auto h = yard::actor<Holder>().name(argv[2]).detached().remote();
    return *h.call(&Holder::ping).remote().get(std::chrono::seconds(60)) == 1 ? 0 : 1;
  }
  // A variable as the driver, a task, an actor and an actor with a runtime_env of its own see it.
  if (mode == "env" && argc > 2) {
    std::string name = argv[2];
    yard::RuntimeEnv own;
    own.env_vars[name] = "the-actor's-own";
    own.working_dir = "/tmp";
    auto plain = yard::actor<Holder>().remote();
    auto with_own = yard::actor<Holder>().runtime_env(own).remote();
    std::printf("driver: %s\n", env_here(name).c_str());
    std::printf("task: %s\n", yard::task(env_here).remote(name).get(std::chrono::seconds(60))->c_str());
    std::printf("actor: %s\n", plain.call(&Holder::env).remote(name).get(std::chrono::seconds(60))->c_str());
    std::printf("own: %s\n", with_own.call(&Holder::env).remote(name).get(std::chrono::seconds(60))->c_str());
    // A task of its own environment runs in a worker started with it; the job's other tasks not.
    auto own_task = yard::task(env_here).runtime_env(own).remote(name);
    auto plain_task = yard::task(env_here).remote(name);
    std::printf("task-own: %s\n", own_task.get(std::chrono::seconds(60))->c_str());
    std::printf("task-after: %s\n", plain_task.get(std::chrono::seconds(60))->c_str());
    return 0;
  }
  // NAME with the job's default lifetime, and NAME-own that chooses to end with the job.
  if (mode == "default-lifetime" && argc > 2) {
    auto h = yard::actor<Holder>().name(argv[2]).remote();
    auto own = yard::actor<Holder>().name(std::string(argv[2]) + "-own").lifetime(yard::Lifetime::kNonDetached).remote();
    return *h.call(&Holder::ping).remote().get(std::chrono::seconds(60)) + *own.call(&Holder::ping).remote().get(std::chrono::seconds(60)) == 2 ? 0 : 1;
  }
  // 0 when a live actor of that name is in this job's namespace, 4 when there is none.
  if (mode == "find" && argc > 2) {
    try {
      auto h = yard::get_actor<Holder>(argv[2]);
      return *h.call(&Holder::ping).remote().get(std::chrono::seconds(60)) == 1 ? 0 : 1;
    } catch (const yard::Error& e) {
      std::printf("not found: %s\n", e.what());
      return 4;
    }
  }
  if (mode == "use" && argc > 2) {
    yard::ActorHandle<Holder> h;
    try {
      h = yard::get_actor<Holder>(argv[2]);
    } catch (const yard::NotFoundError& e) {
      std::printf("not found: %s\n", e.what());
      return 4;
    }
    std::printf("found %s on %s\n", argv[2], h.call(&Holder::where).remote().get(std::chrono::seconds(60))->c_str());
    h.kill();
    return 0;
  }
  if (mode == "workdir" && argc > 2) {
    Holder self;
    std::printf("driver: %s\n", self.read("data.txt").c_str());
    auto h = yard::actor<Holder>().node_affinity(argv[2]).remote();
    std::printf("actor on %s: %s\n", h.call(&Holder::where).remote().get(std::chrono::seconds(60))->c_str(),
                h.call(&Holder::read).remote("data.txt").get(std::chrono::seconds(60))->c_str());
    return 0;
  }
  if (mode == "churn" && argc > 2) {
    int rounds = 0, failed = 0;
    while (!std::filesystem::exists(argv[2])) {
      ++rounds;
      try {
        auto pg = yard::placement_group({{{"CPU", 0.5}}});
        if (!pg.wait(std::chrono::seconds(60))) throw std::runtime_error("the placement group was not placed in 60 s");
        auto h = yard::actor<Holder>().placement_group(pg).remote();
        int pinged = *h.call(&Holder::ping).remote().get(std::chrono::seconds(60));
        int doubled = *yard::task(twice).remote(rounds).get(std::chrono::seconds(60));
        if (pinged != 1 || doubled != 2 * rounds) throw std::runtime_error("a wrong answer");
        yard::kill(h);
        pg.remove();
        std::printf("round %d\n", rounds);
      } catch (const std::exception& e) {
        ++failed;
        std::printf("failed %d: %s\n", rounds, e.what());
      }
      std::fflush(stdout);
    }
    std::printf("done %d failed %d\n", rounds, failed);
    return failed == 0 ? 0 : 1;
  }
  if (mode == "placements" && argc > 2) {  // placement groups one after another, each success timed
    auto now_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
    int placed = 0, failed = 0;
    while (!std::filesystem::exists(argv[2])) {
      try {
        auto pg = yard::placement_group({{{"CPU", 0.5}}});
        if (!pg.wait(std::chrono::seconds(10))) throw std::runtime_error("not placed in 10 s");
        pg.remove();
        ++placed;
        std::printf("placed %lld\n", static_cast<long long>(now_ms()));
      } catch (const std::exception& e) {
        ++failed;
        std::printf("failed %lld: %s\n", static_cast<long long>(now_ms()), e.what());
      }
      std::fflush(stdout);
      // Paces the loop (its lines are the measurement's resolution), and a refused request's retry.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::printf("done %d failed %d\n", placed, failed);
    return 0;
  }
  if (mode == "ledger" && argc > 2) {
    auto store = yard::job_rendezvous("ledger");
    int wrote = 0, errors = 0;
    while (!std::filesystem::exists(argv[2])) {
      try {
        store->set("k" + std::to_string(wrote), std::to_string(wrote));
        ++wrote;
      } catch (const std::exception& e) {
        ++errors;  // not acknowledged: not in the ledger
        std::printf("error: %s\n", e.what());
      }
    }
    std::vector<std::string> keys;
    for (int i = 0; i < wrote; ++i) keys.push_back("k" + std::to_string(i));
    std::printf("wrote %d missing %zu errors %d\n", wrote, store->absent(keys).size(), errors);
    return 0;
  }
  if (mode == "nap" && argc > 2)  // one task that marks its start, then holds its CPU a minute
    return *yard::task(nap).remote(std::string(argv[2])).get(std::chrono::seconds(90)) == 1 ? 0 : 1;
  if (mode == "infeasible" && argc > 3) return infeasible(argv[2], std::atol(argv[3]));
  if (mode == "remote" && argc > 2) {
    auto h = yard::actor<Holder>().node_affinity(argv[2], true).max_restarts(1).remote();
    std::printf("on %s\n", h.call(&Holder::where).remote().get(std::chrono::seconds(60))->c_str());
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    for (int attempt = 0;; ++attempt) {
      try {
        std::printf("now %s\n", h.call(&Holder::where).remote().get(std::chrono::seconds(60))->c_str());
        return 0;
      } catch (const yard::ActorRestarting& e) {
        if (attempt > 0) throw;  // a call that was on its way when the node was cut off
      }
    }
  }
  return 2;
}
