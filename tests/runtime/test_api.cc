// The public API against a real embedded cluster: this binary starts one (redis-server, head,
// worker processes running this same binary) and every test case shares it.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "submit/pending_calls.h"
#include "yard/node_state.h"
#include "yard/process.h"
#include "support.h"

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/mutex.hpp>

#include "yard/condition.h"
#include "yard/yard.h"

using namespace std::chrono_literals;

namespace {

int add(int a, int b) { return a + b; }
std::string greet(std::string who) { return "hello " + who; }
std::vector<double> scale(std::vector<double> v, double k) {
  for (auto& x : v) x *= k;
  return v;
}
int fail_with(std::string msg) { throw std::out_of_range(msg); }
int crash_segv(int) {
  raise(SIGSEGV);
  return 0;
}
int crash_abort(int) { abort(); }
int worker_pid() { return getpid(); }
int slow_echo(int v, int ms) {
  usleep(ms * 1000);
  return v;
}
int nested_sum(int n) {
  // A task that submits tasks: the worker is a client of the cluster too.
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(yard::task(add).remote(i, 1));
  int s = 0;
  for (auto& v : yard::get(refs, 30s)) s += *v;
  return s;
}
YARD_REMOTE(add, greet, scale, fail_with, crash_segv, crash_abort, worker_pid, slow_echo, nested_sum);

// Refs inside values: the worker owns what it puts and the driver borrows it, and back.
yard::ObjectRef<std::string> make_owned(std::string s) { return yard::put(s + "!"); }
int sum_refs(std::vector<yard::ObjectRef<int>> refs) {
  int s = 0;
  for (auto& r : refs) s += *r.get(std::chrono::seconds(30));
  return s;
}
std::vector<uint8_t> big_bytes(int mb, int fill) { return std::vector<uint8_t>(size_t(mb) << 20, uint8_t(fill)); }
// A checksum of a large argument: every element, weighted by its position.
uint64_t checksum(std::vector<uint32_t> v) {
  uint64_t s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += uint64_t(v[i]) * (i % 7 + 1);
  return s;
}
// The same checksum, read in place.
uint64_t checksum_view(yard::ArrayView<uint32_t> v) {
  uint64_t s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += uint64_t(v[i]) * (i % 7 + 1);
  return s;
}
YARD_REMOTE(make_owned, sum_refs, big_bytes, checksum, checksum_view);

// A parameter declared as a ref receives the ref (Ray's rule); one declared as a value, the value.
int deref(yard::ObjectRef<int> r) { return *r.get(std::chrono::seconds(30)) * 10; }
yard::ObjectRef<int> pass_on(yard::ObjectRef<int> r) { return r; }
bool ready_in_time(yard::ObjectRef<int> r) {
  return yard::wait(std::vector<yard::ObjectRef<int>>{r}, 1, std::chrono::seconds(30)).ready.size() == 1;
}
YARD_REMOTE(deref, pass_on, ready_in_time);

// A worker's namespace is its job's.
std::string namespace_here() { return yard::get_namespace(); }
YARD_REMOTE(namespace_here);

class Counter;
int bump_via(yard::ActorHandle<Counter> c, int by);

class Counter {
 public:
  explicit Counter(int start) : n_(start) {}
  int incr(int by) { return n_ += by; }
  int value() { return n_; }
  int pid() { return getpid(); }
  int boom() { abort(); }
  int throws() { throw std::runtime_error("counter says no"); }
  yard::ObjectRef<int> stash() { return yard::put(n_); }
  std::vector<uint8_t> blob(int mb) { return std::vector<uint8_t>(size_t(mb) << 20, 9); }
  uint64_t check(std::vector<uint32_t> v) { return checksum(std::move(v)); }

 private:
  int n_;
};
YARD_ACTOR(Counter, yard::ctor<int>, &Counter::incr, &Counter::value, &Counter::pid, &Counter::boom, &Counter::throws, &Counter::stash, &Counter::blob, &Counter::check);

// A task that receives an actor handle as an argument and calls the actor.
int bump_via(yard::ActorHandle<Counter> c, int by) {
  return *c.call(&Counter::incr).remote(by).get(std::chrono::seconds(30));
}
YARD_REMOTE(bump_via);

// A task that receives actor handles inside a vector and calls each.
int bump_all(std::vector<yard::ActorHandle<Counter>> cs, int by) {
  int sum = 0;
  for (auto& c : cs) sum += *c.call(&Counter::incr).remote(by).get(std::chrono::seconds(30));
  return sum;
}
YARD_REMOTE(bump_all);

// An actor whose creation waits for its argument.
class Late {
 public:
  explicit Late(yard::ObjectRef<int> r) : v_(*r.get(std::chrono::seconds(30))) {}
  int incr(int by) { return v_ += by; }

 private:
  int v_;
};
YARD_ACTOR(Late, yard::ctor<yard::ObjectRef<int>>, &Late::incr);

// An actor that makes a named, detached actor of its own.
class Maker {
 public:
  Maker() = default;
  int make(std::string name) {
    auto h = yard::actor<Counter>(5).name(name).detached().remote();
    return *h.call(&Counter::value).remote().get(std::chrono::seconds(30));
  }
  int pid() { return getpid(); }
  // Returns the handle at once; the creation leaves only once its argument is ready, `ms` later.
  yard::ActorHandle<Late> make_later(int ms) { return yard::actor<Late>(yard::task(slow_echo).remote(7, ms)).remote(); }
  // A task of its own: a worker is leased to this process (and kept a moment for the next).
  int run_task() { return *yard::task(slow_echo).remote(7, 0).get(std::chrono::seconds(30)); }
};
YARD_ACTOR(Maker, yard::ctor<>, &Maker::make, &Maker::pid, &Maker::make_later, &Maker::run_task);

class Picky {
 public:
  explicit Picky(int v) {
    if (v < 0) throw std::invalid_argument("negative start");
  }
  int ok() { return 1; }
};
YARD_ACTOR(Picky, yard::ctor<int>, &Picky::ok);

// Ends itself when asked.
class Quitter {
 public:
  int ping() { return 1; }
  int quit() { yard::exit_actor(); }
};
YARD_ACTOR(Quitter, &Quitter::ping, &Quitter::quit);

// Its process is killed (SIGKILL, as by `kill -9`) while constructing, in each of its first
// `lives_lost` lives.
class Fragile {
 public:
  explicit Fragile(int lives_lost) {
    if (yard::restart_count() < lives_lost) raise(SIGKILL);
  }
  int restarts() { return yard::restart_count(); }
};
YARD_ACTOR(Fragile, yard::ctor<int>, &Fragile::restarts);

// Calls wait for each other: they only all return if they run at the same time.
class Rendezvous {
 public:
  Rendezvous() = default;
  int arrive(int expected) {
    cond_.update([&] { ++arrived_; });
    int seen = -1;
    cond_.wait_for([&] { return arrived_ >= expected; }, 10s, [&] { seen = arrived_; });
    return seen;
  }
  // Uses about `kib` KiB of this call's stack (a frame of 1 KiB per level).
  int deep(int kib) {
    volatile char frame[1024];
    frame[kib % 1024] = static_cast<char>(kib);
    int below = kib <= 1 ? 0 : deep(kib - 1);
    return below + 1 + (frame[kib % 1024] - static_cast<char>(kib));  // read after the call: a real frame
  }

 private:
  yard::Condition cond_;
  int arrived_ = 0;
};
YARD_ACTOR(Rendezvous, yard::ctor<>, &Rendezvous::arrive, &Rendezvous::deep);

// Ordinary C++ synchronisation: calls that meet at a std::condition_variable can only finish
// together, so they must run at once on threads of their own.
class Latch {
 public:
  Latch() = default;
  int arrive(int expected) {
    std::unique_lock<std::mutex> l(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(l, 10s, [&] { return arrived_ >= expected; }) ? arrived_ : -1;
  }
  // How many calls of io ran at that moment, this one included (it holds its thread `ms`).
  int io(int ms) {
    int now = ++in_io_;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    --in_io_;
    return now;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<int> in_io_{0};
};
YARD_ACTOR(Latch, yard::ctor<>, &Latch::arrive, &Latch::io);

}  // namespace

void yard_test_worker_hook(int argc, char** argv) {
  yard::InitOptions o;
  o.num_cpus = 2;
  yard::init(o, argc, argv);  // workers never return from here
}

TEST_CASE("tasks return typed values", "[api][tasks]") {
  CHECK(*yard::task(add).remote(2, 40).get() == 42);
  CHECK(*yard::task(greet).remote("yard").get() == "hello yard");
  auto v = yard::task(scale).remote(std::vector<double>{1, 2, 3}, 2.0).get();
  CHECK(*v == std::vector<double>{2, 4, 6});
}

TEST_CASE("many tasks in flight all complete", "[api][tasks]") {
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 500; ++i) refs.push_back(yard::task(add).remote(i, 1));
  auto vals = yard::get(refs, 60s);
  long sum = 0;
  for (auto& x : vals) sum += *x;
  CHECK(sum == 500L * 501 / 2);
}

TEST_CASE("large values travel and come back intact", "[api][objects]") {
  std::vector<double> big(1 << 18);  // 2 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i);
  auto r = yard::task(scale).remote(big, 0.5).get(60s);
  REQUIRE(r->size() == big.size());
  CHECK((*r)[12345] == 12345 * 0.5);
  CHECK(r->back() == (big.size() - 1) * 0.5);
}

TEST_CASE("put, get and refs as arguments", "[api][objects]") {
  auto a = yard::put(20);
  CHECK(*a.get() == 20);
  auto b = yard::task(add).remote(a, 1);             // a put value as an argument
  auto c = yard::task(add).remote(b, b);             // a pending task result as an argument
  CHECK(*c.get(30s) == 42);
  auto s = yard::put(std::string("refs"));
  CHECK(*yard::task(greet).remote(s).get() == "hello refs");
}

TEST_CASE("errors propagate through dependent tasks", "[api][errors]") {
  auto bad = yard::task(fail_with).remote("first");
  auto dependent = yard::task(add).remote(bad, 1);
  CHECK_THROWS_AS(dependent.get(30s), yard::RemoteError);
}

TEST_CASE("remote exceptions carry type, message and place", "[api][errors]") {
  try {
    yard::task(fail_with).remote("index 7").get(30s);
    FAIL("no exception");
  } catch (const yard::RemoteError& e) {
    CHECK(e.remote_type() == "std::out_of_range");
    CHECK(e.remote_message() == "index 7");
    CHECK_THAT(e.location(), Catch::Contains("fail_with") && Catch::Contains("pid"));
  }
}

TEST_CASE("a task's or call's name shows in its errors beside what it ran", "[api][errors]") {
  try {
    yard::task(fail_with).name("check log-7").remote("index 7").get(30s);
    FAIL("no exception");
  } catch (const yard::RemoteError& e) {
    CHECK_THAT(e.location(), Catch::StartsWith("check log-7 (fail_with) on worker "));
  }
  auto c = yard::actor<Counter>(1).remote();
  try {
    c.call(&Counter::throws).name("audit 3").remote().get(30s);
    FAIL("no exception");
  } catch (const yard::RemoteError& e) {
    CHECK_THAT(e.location(), Catch::Contains("audit 3 (") && Catch::Contains("::throws) on worker "));
  }
  CHECK(*c.call(&Counter::incr).name("bump").remote(2).get(30s) == 3);  // a named call runs as any
}

TEST_CASE("wait returns the ready refs first and honours its timeout", "[api][objects]") {
  auto fast = yard::task(slow_echo).remote(1, 0);
  auto slow = yard::task(slow_echo).remote(2, 3000);
  auto res = yard::wait(std::vector<yard::ObjectRef<int>>{fast, slow}, 1, 20s);
  REQUIRE(res.ready.size() == 1);
  CHECK(res.ready[0].id() == fast.id());
  CHECK(res.not_ready.size() == 1);
  auto none = yard::wait(std::vector<yard::ObjectRef<int>>{slow}, 1, 50ms);
  CHECK(none.ready.empty());
  CHECK_THROWS_AS(slow.get(10ms), yard::TimeoutError);
  CHECK(*slow.get(30s) == 2);
}

TEST_CASE("a task whose worker segfaults fails with WorkerCrashed and the pool recovers", "[api][crash]") {
  CHECK_THROWS_AS(yard::task(crash_segv).max_retries(0).remote(1).get(60s), yard::WorkerCrashed);
  CHECK_THROWS_AS(yard::task(crash_abort).max_retries(1).remote(1).get(60s), yard::WorkerCrashed);
  // Workers were replaced: new tasks run.
  CHECK(*yard::task(add).remote(1, 1).get(60s) == 2);
}

TEST_CASE("kill -9 of a worker mid-task gives WorkerCrashed", "[api][crash]") {
  // Find a worker pid, then kill it while it sleeps in a task.
  auto pid = *yard::task(worker_pid).remote().get(30s);
  REQUIRE(pid > 0);
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(yard::task(slow_echo).max_retries(0).remote(i, 2000));
  usleep(300 * 1000);  // lets the tasks start; the outcome below does not depend on it
  kill(pid, SIGKILL);
  int crashed = 0, ok = 0;
  for (auto& r : refs) {
    try {
      r.get(30s);
      ++ok;
    } catch (const yard::WorkerCrashed&) {
      ++crashed;
    }
  }
  CHECK(crashed + ok == 4);
  CHECK(*yard::task(add).remote(2, 2).get(60s) == 4);
}

// Tasks made one after another leave together, to each worker as one request: each is still
// answered alone (its value, its error), a task with an ObjectRef argument travels on its own
// among them, and a worker lost under a group fails only the task that killed it (the others
// are retried).
TEST_CASE("tasks made together are each answered alone", "[api][tasks]") {
  auto base = yard::put(1000);
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 600; ++i) {
    if (i % 50 == 7) refs.push_back(yard::task(fail_with).remote("task " + std::to_string(i)));
    else if (i % 10 == 3) refs.push_back(yard::task(add).remote(base, i));
    else refs.push_back(yard::task(add).remote(i, 1));
  }
  for (int i = 0; i < 600; ++i) {
    if (i % 50 == 7) {
      CHECK_THROWS_WITH(refs[i].get(60s), Catch::Contains("task " + std::to_string(i)));
    } else {
      CHECK(*refs[i].get(60s) == (i % 10 == 3 ? 1000 + i : i + 1));
    }
  }

  refs.clear();
  for (int i = 0; i < 200; ++i) refs.push_back(yard::task(add).remote(i, 2));
  auto crash = yard::task(crash_segv).max_retries(0).remote(1);
  for (int i = 200; i < 400; ++i) refs.push_back(yard::task(add).remote(i, 2));
  CHECK_THROWS_AS(crash.get(60s), yard::WorkerCrashed);
  for (int i = 0; i < 400; ++i) CHECK(*refs[i].get(60s) == i + 2);
}

TEST_CASE("actors keep state and run calls in order", "[api][actors]") {
  auto c = yard::actor<Counter>(10).remote();
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 100; ++i) refs.push_back(c.call(&Counter::incr).remote(1));
  auto vals = yard::get(refs, 30s);
  for (int i = 0; i < 100; ++i) CHECK(*vals[i] == 11 + i);
  CHECK(*c.call(&Counter::value).remote().get() == 110);
}

TEST_CASE("actor calls take refs as arguments", "[api][actors]") {
  auto c = yard::actor<Counter>(0).remote();
  auto x = yard::task(add).remote(3, 4);
  CHECK(*c.call(&Counter::incr).remote(x).get(30s) == 7);
}

TEST_CASE("a detached actor made by another actor outlives its maker and is found by name", "[api][actors]") {
  auto maker = yard::actor<Maker>().remote();
  int maker_pid = *maker.call(&Maker::pid).remote().get(30s);
  REQUIRE(*maker.call(&Maker::make).remote(std::string("made-by-an-actor")).get(60s) == 5);
  maker.kill();
  REQUIRE(yard::test::eventually([&] { return kill(maker_pid, 0) != 0; }, 20s));
  auto kept = yard::get_actor<Counter>("made-by-an-actor");
  CHECK(*kept.call(&Counter::incr).remote(1).get(30s) == 6);
  kept.kill();
}

TEST_CASE("an actor's handle that reaches a caller before its creation reaches the head works", "[api][actors]") {
  auto maker = yard::actor<Maker>().remote();
  auto made = *maker.call(&Maker::make_later).remote(1500).get(30s);
  // The head has not heard of it yet: the call waits for it rather than finding it dead.
  CHECK(*made.call(&Late::incr).remote(1).get(60s) == 8);
  made.kill();
  maker.kill();
}

TEST_CASE("an actor made by another dies with its maker's process, unless made detached", "[api][actors]") {
  auto maker = yard::actor<Maker>().remote();
  auto made = *maker.call(&Maker::make_later).remote(0).get(30s);
  REQUIRE(*made.call(&Late::incr).remote(1).get(60s) == 8);
  maker.kill();
  std::string why;
  CHECK(yard::test::eventually([&] {
    try {
      made.call(&Late::incr).remote(0).get(30s);
      return false;
    } catch (const yard::ActorDied& e) {
      why = e.what();
      return true;
    }
  }, 30s));
  CHECK_THAT(why, Catch::Contains("its owner, actor " + maker.id()));
}

TEST_CASE("an actor's runtime_env: refused when it cannot work, and said so when its node lacks it", "[api][actors]") {
  yard::RuntimeEnv bad;
  bad.env_vars["YARD_TOKEN"] = "mine";
  CHECK_THROWS_AS(yard::actor<Counter>(1).runtime_env(bad), yard::InvalidArgument);
  yard::RuntimeEnv elsewhere;
  elsewhere.working_dir = "/no/such/dir/here";
  auto a = yard::actor<Counter>(1).runtime_env(elsewhere).remote();
  CHECK_THROWS_WITH(a.call(&Counter::value).remote().get(60s), Catch::Contains("/no/such/dir/here is not on node"));
  // A task's, the same way.
  CHECK_THROWS_AS(yard::task(add).runtime_env(bad), yard::InvalidArgument);
  CHECK_THROWS_WITH(yard::task(add).runtime_env(elsewhere).remote(1, 2).get(60s),
                    Catch::Contains("/no/such/dir/here is not on node"));
}

TEST_CASE("named actors are found by name and checked by class", "[api][actors]") {
  auto c = yard::actor<Counter>(5).name("the-counter").remote();
  CHECK(*c.call(&Counter::incr).remote(1).get(30s) == 6);
  auto again = yard::get_actor<Counter>("the-counter");
  CHECK(*again.call(&Counter::value).remote().get(30s) == 6);
  CHECK_THROWS_AS(yard::get_actor<Counter>("nobody"), yard::NotFoundError);
  CHECK_THROWS_AS(yard::get_actor<Picky>("the-counter"), yard::NotFoundError);
}

TEST_CASE("workers leased to an actor's process come back when it is killed", "[api][actors]") {
  // More kills than the cluster has CPUs, each right after the actor's task: a worker leased to a
  // dead process would be lost for good.
  for (int i = 0; i < 4; ++i) {
    auto m = yard::actor<Maker>().remote();
    REQUIRE(*m.call(&Maker::run_task).remote().get(60s) == 7);
    m.kill();
  }
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(yard::task(slow_echo).remote(i, 100));
  int sum = 0;
  for (auto& v : yard::get(refs, 60s)) sum += *v;
  CHECK(sum == 6);
}

TEST_CASE("names live in namespaces: the job's own by default, or one that is named", "[api][actors][namespaces]") {
  // The job's own namespace is named by its id, in the driver and in its workers alike.
  CHECK(yard::get_namespace() == yard::job_id());
  CHECK(*yard::task(namespace_here).remote().get(30s) == yard::job_id());
  // One name in two namespaces names two actors; a lookup finds the one of the namespace asked.
  auto in_a = yard::actor<Counter>(1).name("twin", "ns-a").remote();
  auto in_b = yard::actor<Counter>(2).name("twin", "ns-b").remote();
  CHECK(*yard::get_actor<Counter>("twin", "ns-a").call(&Counter::value).remote().get(30s) == 1);
  CHECK(*yard::get_actor<Counter>("twin", "ns-b").call(&Counter::value).remote().get(30s) == 2);
  // Not in the job's own namespace, nor in another.
  CHECK_THROWS_AS(yard::get_actor<Counter>("twin"), yard::NotFoundError);
  CHECK_THROWS_AS(yard::get_actor<Counter>("twin", "ns-c"), yard::NotFoundError);
  // Within one namespace a live actor's name is its own.
  auto taken = yard::actor<Counter>(3).name("twin", "ns-a").remote();
  CHECK_THROWS_WITH(taken.call(&Counter::value).remote().get(30s), Catch::Contains("namespace 'ns-a'"));
  // A placement group's name is looked up in the namespace it was made in.
  auto g = yard::placement_group({{{"CPU", 0.25}}}, yard::PlacementStrategy::kPack, "ns-group");
  CHECK(yard::get_placement_group("ns-group").has_value());
  CHECK(yard::get_placement_group("ns-group", yard::job_id()).has_value());
  CHECK_FALSE(yard::get_placement_group("ns-group", "ns-a").has_value());
  g.remove();
  in_a.kill();
  in_b.kill();
}

TEST_CASE("the cluster's nodes, their addresses, resources and liveness, from code", "[api]") {
  auto all = yard::nodes();
  REQUIRE(!all.empty());
  bool mine = false;
  for (auto& n : all) {
    CHECK(n.state == yard::NodeState::kAlive);
    CHECK(n.address.find(':') != std::string::npos);
    CHECK(n.total.count("CPU") == 1);
    CHECK(n.available.count("CPU") == 1);
    CHECK(n.available["CPU"] <= n.total["CPU"]);
    if (n.id == yard::node_id()) mine = true;
  }
  CHECK(mine);  // the driver's own node is among them
}

TEST_CASE("a parameter declared as a ref receives the ref; one declared as a value the value", "[api][refs]") {
  auto put = yard::put(4);
  CHECK(*yard::task(deref).remote(put).get(30s) == 40);
  auto made = yard::task(add).remote(2, 5);  // a task's result, maybe not ready yet
  CHECK(*yard::task(deref).remote(made).get(30s) == 70);
  CHECK(*yard::task(ready_in_time).remote(made).get(30s));
  // The ref goes there and back, and still names the object.
  auto back = *yard::task(pass_on).remote(put).get(30s);
  CHECK(*back.get(30s) == 4);
  CHECK(*yard::task(add).remote(made, 1).get(30s) == 8);  // a value parameter: resolved first
}

TEST_CASE("an actor's constructor takes a ref as its parameter is declared: the value or the ref", "[api][refs][actors]") {
  auto made = yard::task(add).remote(2, 5);  // a task's result, maybe not ready yet
  // Counter(int): the ref is resolved and its value passed.
  auto counter = yard::actor<Counter>(made).remote();
  CHECK(*counter.call(&Counter::incr).remote(1).get(30s) == 8);
  CHECK(*yard::actor<Counter>(yard::put(40)).remote().call(&Counter::value).remote().get(30s) == 40);
  // Late(ObjectRef<int>): the ref itself, which the constructor gets.
  auto late = yard::actor<Late>(made).remote();
  CHECK(*late.call(&Late::incr).remote(2).get(30s) == 9);
}

TEST_CASE("kill with no_restart = false restarts an actor within its budget", "[api][actors]") {
  auto c = yard::actor<Counter>(5).max_restarts(1).remote();
  int first = *c.call(&Counter::pid).remote().get(30s);
  CHECK(*c.call(&Counter::incr).remote(1).get(30s) == 6);
  yard::kill(c, /*no_restart=*/false);
  CHECK(*c.call(&Counter::pid).remote().get(60s) != first);  // a new process
  CHECK(*c.call(&Counter::value).remote().get(30s) == 5);    // constructed again
  yard::kill(c, false);  // no restart left: it dies
  CHECK_THROWS_AS(c.call(&Counter::value).remote().get(60s), yard::ActorDied);
}

TEST_CASE("an actor that ends itself with exit_actor is not restarted, and its name is free", "[api][actors]") {
  auto q = yard::actor<Quitter>().name("quitter").max_restarts(3).remote();
  CHECK(*q.call(&Quitter::ping).remote().get(30s) == 1);
  try {
    q.call(&Quitter::quit).remote().get(60s);
    FAIL("the call that ended the actor returned");
  } catch (const yard::ActorDied& e) {
    CHECK_THAT(e.what(), Catch::Contains("ended itself"));
  }
  CHECK_THROWS_AS(q.call(&Quitter::ping).remote().get(60s), yard::ActorDied);
  CHECK_THROWS_AS(yard::get_actor<Quitter>("quitter"), yard::NotFoundError);
  CHECK_THROWS_AS(yard::exit_actor(), yard::Error);  // not in an actor
}

TEST_CASE("a killed named actor's name is free when kill returns", "[api][actors]") {
  auto c = yard::actor<Counter>(1).name("short-lived").remote();
  CHECK(*c.call(&Counter::value).remote().get(30s) == 1);
  yard::kill(c);
  CHECK_THROWS_AS(yard::get_actor<Counter>("short-lived"), yard::NotFoundError);
  auto next = yard::actor<Counter>(2).name("short-lived").remote();
  CHECK(*yard::get_actor<Counter>("short-lived").call(&Counter::value).remote().get(30s) == 2);
  yard::kill(next);
}

TEST_CASE("resource amounts must be positive, finite, and whole above 1", "[api]") {
  auto says = [](auto&& f, const std::string& what) {
    try {
      f();
    } catch (const yard::InvalidArgument& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  CHECK(says([] { yard::actor<Counter>(0).resources({{"CPU", 0}}); }, "the amount of CPU (0) must be above 0"));
  CHECK(says([] { yard::actor<Counter>(0).resources({{"CPU", -1}}); }, "CPU (-1) must be above 0"));
  CHECK(says([] { yard::task(add).resources({{"CPU", 1.5}}); }, "a task's resources: the amount of CPU (1.5) above 1 must be a whole number"));
  CHECK(says([] { yard::task(add).resources({{"GPU", std::nan("")}}); }, "GPU (nan) is not a number"));
  CHECK(says([] { yard::placement_group({{{"CPU", 1}}, {{"CPU", 2.5}}}); }, "placement group bundle 1: the amount of CPU (2.5)"));
  CHECK(says([] { yard::placement_group({}); }, "at least one bundle"));
  // Fractions below 1 and whole amounts above it run.
  CHECK(*yard::task(add).resources({{"CPU", 0.5}}).remote(1, 2).get(30s) == 3);
}

TEST_CASE("a placement group's name is one live group's", "[api][pg]") {
  auto first = yard::placement_group({{{"CPU", 0.25}}}, yard::PlacementStrategy::kPack, "the-group");
  CHECK(first.wait(30s));
  try {
    yard::placement_group({{{"CPU", 0.25}}}, yard::PlacementStrategy::kPack, "the-group");
    FAIL("a second group named the-group was accepted");
  } catch (const yard::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("a placement group named 'the-group' exists already"));
  }
  // Found by name in this job and by id, and listed with its state and nodes.
  auto found = yard::get_placement_group("the-group");
  REQUIRE(found);
  CHECK(found->id() == first.id());
  CHECK(found->wait(1s));
  CHECK(found->bundles() == first.bundles());
  CHECK(yard::placement_group_by_id(first.id())->id() == first.id());
  CHECK_FALSE(yard::get_placement_group("no-such-group"));
  CHECK_FALSE(yard::placement_group_by_id("pg-none"));
  bool listed = false;
  for (auto& g : yard::placement_groups())
    if (g.id == first.id()) {
      listed = true;
      CHECK(g.name == "the-group");
      CHECK(g.job == yard::job_id());
      CHECK(g.state == "CREATED");
      CHECK(g.strategy == yard::PlacementStrategy::kPack);
      REQUIRE(g.nodes.size() == 1);
      CHECK(!g.nodes[0].empty());
    }
  CHECK(listed);
  first.remove();
  CHECK(yard::test::eventually([] { return !yard::get_placement_group("the-group"); }, 30s));
  auto second = yard::placement_group({{{"CPU", 0.25}}}, yard::PlacementStrategy::kPack, "the-group");
  CHECK(second.wait(30s));
  second.remove();
}

TEST_CASE("a named actor is found while it is still starting", "[api][actors]") {
  auto c = yard::actor<Counter>(9).name("starting-counter").remote();
  auto found = yard::get_actor<Counter>("starting-counter");  // asked at once: its process is not up yet
  CHECK(*found.call(&Counter::incr).remote(1).get(60s) == 10);
  CHECK(*c.call(&Counter::value).remote().get(30s) == 10);
}

TEST_CASE("killing an actor fails later calls with ActorDied", "[api][actors]") {
  auto c = yard::actor<Counter>(1).remote();
  CHECK(*c.call(&Counter::value).remote().get(30s) == 1);
  yard::kill(c);
  CHECK_THROWS_AS(c.call(&Counter::value).remote().get(30s), yard::ActorDied);
}

TEST_CASE("an actor whose process crashes gives ActorDied, never a hang", "[api][actors][crash]") {
  auto c = yard::actor<Counter>(1).remote();
  CHECK_THROWS_AS(c.call(&Counter::boom).remote().get(30s), yard::ActorDied);
  CHECK_THROWS_AS(c.call(&Counter::value).remote().get(30s), yard::ActorDied);

  auto d = yard::actor<Counter>(1).remote();
  auto pid = *d.call(&Counter::pid).remote().get(30s);
  kill(pid, SIGKILL);
  CHECK_THROWS_AS(d.call(&Counter::value).remote().get(30s), yard::ActorDied);
}

TEST_CASE("a method that throws leaves the actor alive", "[api][actors][errors]") {
  auto c = yard::actor<Counter>(3).remote();
  CHECK_THROWS_WITH(c.call(&Counter::throws).remote().get(30s), Catch::Contains("counter says no"));
  CHECK(*c.call(&Counter::value).remote().get(30s) == 3);
}

TEST_CASE("a constructor that throws gives ActorDied with its message", "[api][actors][errors]") {
  auto p = yard::actor<Picky>(-1).remote();
  CHECK_THROWS_WITH(p.call(&Picky::ok).remote().get(30s), Catch::Contains("negative start"));
  auto q = yard::actor<Picky>(1).remote();
  CHECK(*q.call(&Picky::ok).remote().get(30s) == 1);
}

// A worker lost while constructing is a crash, restarted within the budget like one lost later;
// a constructor that throws is the actor's own answer, and is not.
TEST_CASE("an actor whose worker is killed while constructing restarts within its budget", "[api][actors][crash]") {
  auto once = yard::actor<Fragile>(1).max_restarts(2).remote();
  CHECK(*once.call(&Fragile::restarts).remote().get(60s) == 1);
  auto mortal = yard::actor<Fragile>(1).remote();
  CHECK_THROWS_WITH(mortal.call(&Fragile::restarts).remote().get(60s), Catch::Contains("while constructing"));
  auto doomed = yard::actor<Fragile>(5).max_restarts(2).remote();
  CHECK_THROWS_WITH(doomed.call(&Fragile::restarts).remote().get(60s), Catch::Contains("no restarts left of 2"));
  auto picky = yard::actor<Picky>(-1).max_restarts(2).remote();
  CHECK_THROWS_WITH(picky.call(&Picky::ok).remote().get(30s), Catch::Contains("negative start"));
}

TEST_CASE("an infeasible actor fails at its infeasible_timeout naming the resource; without one it waits", "[api][actors][errors]") {
  auto c = yard::actor<Counter>(1).resources({{"CPU", 64}}).infeasible_timeout(1s).remote();
  CHECK_THROWS_AS(c.call(&Counter::value).remote().get(30s), yard::InfeasibleError);
  auto g = yard::actor<Counter>(1).resources({{"GPU", 1}}).infeasible_timeout(1s).remote();
  CHECK_THROWS_WITH(g.call(&Counter::value).remote().get(30s), Catch::Contains("GPU"));
  // Without a timeout it waits for a node that could hold it (none joins here), and can be killed.
  auto w = yard::actor<Counter>(1).resources({{"GPU", 1}}).remote();
  CHECK_THROWS_AS(w.call(&Counter::value).remote().get(2s), yard::TimeoutError);
  yard::kill(w);
  CHECK_THROWS_AS(w.call(&Counter::value).remote().get(30s), yard::ActorDied);
}

TEST_CASE("max_concurrency runs calls on threads: calls that meet at a std::condition_variable finish", "[api][actors]") {
  auto l = yard::actor<Latch>().max_concurrency(3).remote();
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 3; ++i) refs.push_back(l.call(&Latch::arrive).remote(3));
  for (auto& v : yard::get(refs, 30s)) CHECK(*v == 3);
  CHECK_THROWS_AS(yard::actor<Latch>().max_concurrency(0), yard::InvalidArgument);
}

TEST_CASE("concurrency groups: a group's methods run at most its limit at once, beside the default group",
          "[api][actors]") {
  auto l = yard::actor<Latch>().max_concurrency(3).concurrency_group("io", 1, &Latch::io).remote();
  std::vector<yard::ObjectRef<int>> io, meet;
  for (int i = 0; i < 4; ++i) io.push_back(l.call(&Latch::io).remote(150));
  // The default group's three threads meet while the io calls queue behind one another.
  for (int i = 0; i < 3; ++i) meet.push_back(l.call(&Latch::arrive).remote(3));
  for (auto& v : yard::get(meet, 30s)) CHECK(*v == 3);
  for (auto& v : yard::get(io, 30s)) CHECK(*v == 1);
  // A call may name its group; a group the actor lacks is an error naming it.
  CHECK(*l.call(&Latch::io).group("io").remote(1).get(30s) == 1);
  CHECK_THROWS_WITH(l.call(&Latch::io).group("disk").remote(1).get(30s), Catch::Contains("'disk'"));
  CHECK_THROWS_AS(yard::actor<Latch>().concurrency_group("io", 0, &Latch::io), yard::InvalidArgument);
}

TEST_CASE("max_concurrency with fibers runs calls concurrently on fibers", "[api][actors]") {
  auto r = yard::actor<Rendezvous>().max_concurrency(4, yard::Concurrency::kFibers).remote();
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(r.call(&Rendezvous::arrive).remote(4));
  for (auto& v : yard::get(refs, 30s)) CHECK(*v >= 4);
}

TEST_CASE("a concurrent actor's calls have a thread's stack, reused from call to call", "[api][actors]") {
  for (auto how : {yard::Concurrency::kFibers, yard::Concurrency::kThreads}) {
    auto r = yard::actor<Rendezvous>().max_concurrency(4, how).remote();
    std::vector<yard::ObjectRef<int>> refs;
    for (int i = 0; i < 8; ++i) refs.push_back(r.call(&Rendezvous::deep).remote(4096));  // 4 MiB each
    for (auto& v : yard::get(refs, 60s)) CHECK(*v == 4096);
  }
}

TEST_CASE("tasks can submit tasks", "[api][tasks]") {
  CHECK(*yard::task(nested_sum).remote(10).get(60s) == 55);
}

TEST_CASE("actor handles travel as arguments", "[api][actors]") {
  auto c = yard::actor<Counter>(100).remote();  // passed on before it is even up
  auto r = yard::task(bump_via).remote(c, 5);
  CHECK(*r.get(60s) == 105);
  CHECK(*c.call(&Counter::value).remote().get(30s) == 105);
  auto dead = yard::actor<Counter>(1).remote();
  yard::kill(dead);
  CHECK_THROWS_AS(yard::task(bump_via).remote(dead, 1).get(60s), yard::RemoteError);
  // Inside containers too.
  std::vector<yard::ActorHandle<Counter>> two{c, yard::actor<Counter>(7).remote()};
  CHECK(*yard::task(bump_all).remote(two, 1).get(60s) == 106 + 8);
  CHECK(*two[1].call(&Counter::value).remote().get(30s) == 8);
}

TEST_CASE("refs travel inside values and are fetched from their owner", "[api][objects]") {
  // Owned by a worker, borrowed by the driver.
  auto outer = yard::task(make_owned).remote("hi");
  auto inner = *outer.get(30s);
  CHECK(*inner.get(30s) == "hi!");
  // Owned by the driver, borrowed by a worker: a vector of refs as one argument.
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 1; i <= 10; ++i) refs.push_back(i % 2 ? yard::put(i) : yard::task(add).remote(i, 0));
  CHECK(*yard::task(sum_refs).remote(refs).get(60s) == 55);
  // A borrowed ref passed on as a task argument.
  CHECK(*yard::task(greet).remote(inner).get(30s) == "hello hi!");
}

TEST_CASE("a borrowed ref whose owner died fails with OwnerDied, naming the owner", "[api][objects][crash]") {
  auto c = yard::actor<Counter>(7).remote();
  auto ref = *c.call(&Counter::stash).remote().get(30s);
  int pid = *c.call(&Counter::pid).remote().get(30s);
  yard::kill(c);
  // yard::kill returns once the head has it; the process ends a moment later (a get before
  // then is still served). The case is about an owner that is gone.
  REQUIRE(yard::test::eventually([&] {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    return !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
  }, 10s));
  CHECK_THROWS_WITH(ref.get(30s), Catch::Contains("owner"));
  CHECK_THROWS_AS(ref.get(30s), yard::OwnerDied);
}

namespace {
// Shared-memory segments that worker processes of this host currently have.
int worker_segments() {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind("yard-obj-", 0) == 0;
  return n;
}
}  // namespace

TEST_CASE("large results on the same node travel through reused shared memory", "[api][objects][shm]") {
  std::vector<yard::ObjectRef<std::vector<uint8_t>>> held;
  for (int i = 0; i < 3; ++i) held.push_back(yard::task(big_bytes).remote(4, i + 1));
  for (int i = 0; i < 3; ++i) {
    auto v = held[i].get(60s);
    REQUIRE(v->size() == (4u << 20));
    CHECK((*v)[0] == i + 1);
    CHECK(v->back() == i + 1);
  }
  held.clear();
  // Released values free their segments for reuse: many more results, a bounded pool.
  for (int i = 0; i < 40; ++i) {
    auto v = yard::task(big_bytes).remote(2, i % 200).get(60s);
    REQUIRE(v->size() == (2u << 20));
    REQUIRE((*v)[12345] == i % 200);
  }
  CHECK(worker_segments() <= 2 * 16);
  // A large object borrowed from a worker comes the same way.
  auto outer = yard::task(make_owned).remote(std::string(3 << 20, 'z'));
  auto inner = *outer.get(30s);
  CHECK(inner.get(30s)->size() == (3u << 20) + 1);
}

TEST_CASE("100 MB arguments, as values and as refs, reach tasks and actors intact", "[api][objects][shm]") {
  std::vector<uint32_t> v((100u << 20) / 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint32_t(i * 2654435761u);
  uint64_t want = 0;
  for (size_t i = 0; i < v.size(); ++i) want += uint64_t(v[i]) * (i % 7 + 1);
  CHECK(*yard::task(checksum).remote(v).get(60s) == want);
  auto ref = yard::put(v);
  CHECK(*yard::task(checksum).remote(ref).get(60s) == want);
  CHECK(*yard::task(checksum).remote(ref).get(60s) == want);  // the object, now in shared memory
  // Read in place by the worker, as a value and as a ref; and by this process, without a copy.
  CHECK(*yard::task(checksum_view).remote(v).get(60s) == want);
  CHECK(*yard::task(checksum_view).remote(ref).get(60s) == want);
  auto view = ref.view(60s);
  REQUIRE(view.size() == v.size());
  CHECK(view[v.size() - 1] == v.back());
  CHECK(ref.view().data() == view.data());  // the stored bytes themselves
  auto c = yard::actor<Counter>(0).remote();
  for (int i = 0; i < 2; ++i) {  // the first call learns that the actor is on this host
    CHECK(*c.call(&Counter::check).remote(v).get(60s) == want);
    CHECK(*c.call(&Counter::check).remote(ref).get(60s) == want);
  }
  yard::kill(c);
}

TEST_CASE("the driver's shared-memory segments are gone once its objects are released", "[api][objects][shm]") {
  std::string prefix = "yard-obj-" + std::to_string(getpid()) + "-";
  auto count = [&] {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator("/dev/shm")) n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
  };
  {
    auto ref = yard::put(std::vector<uint32_t>(4u << 20, 3));
    CHECK(*yard::task(checksum).remote(ref).get(60s) > 0);
    CHECK(count() > 0);  // the object moved into shared memory when it was sent
  }
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (count() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  CHECK(count() == 0);
}

TEST_CASE("a dead worker's shared-memory segments are removed by the node manager", "[api][objects][shm][crash]") {
  auto c = yard::actor<Counter>(0).remote();
  auto pid = *c.call(&Counter::pid).remote().get(30s);
  auto held = c.call(&Counter::blob).remote(2);
  CHECK(held.get(30s)->size() == (2u << 20));
  std::string prefix = "yard-obj-" + std::to_string(pid) + "-";
  auto count = [&] {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator("/dev/shm")) n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
  };
  REQUIRE(count() > 0);
  kill(pid, SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (count() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  CHECK(count() == 0);
}

TEST_CASE("a queued task costs its driver under 1 KB of heap", "[api][tasks][memory]") {
  // Two actors take both CPUs of the cluster (once this driver's idle leases went back): the
  // tasks that follow queue.
  std::vector<yard::ActorHandle<Counter>> holds;
  for (int i = 0; i < 2; ++i) holds.push_back(yard::actor<Counter>(0).resources({{"CPU", 1}}).remote());
  for (auto& h : holds) REQUIRE(*h.call(&Counter::value).remote().get(60s) == 0);
  const size_t n = 100000;
  std::vector<yard::ObjectRef<int>> refs;
  refs.reserve(n);
  yard::sys::release_free_heap();
  auto heap = [] { return yard::sys::heap_bytes_in_use(); };
  size_t before = heap();
  for (size_t i = 0; i < n; ++i) refs.push_back(yard::task(add).remote(int(i), 1));
  size_t after = heap();
  CHECK(yard::detail::PendingCalls::instance().count() >= n);  // all still pending
  double per_task = double(after - before) / n;
  INFO("heap per queued task: " << per_task << " bytes");
  CHECK(per_task <= 1024);
  for (auto& h : holds) yard::kill(h);
  auto all = yard::get(refs, 120s);
  for (size_t i = 0; i < n; i += 997) REQUIRE(*all[i] == int(i) + 1);
}

TEST_CASE("submission waits at the bound on pending calls", "[api][tasks][memory]") {
  auto& pending = yard::detail::PendingCalls::instance();
  struct Restore {
    size_t limit;
    ~Restore() { yard::detail::PendingCalls::instance().set_limit(limit); }
  } restore{pending.limit()};
  pending.set_limit(pending.count() + 20);
  pending.reset_peak();
  std::vector<yard::ObjectRef<int>> refs;
  for (int i = 0; i < 300; ++i) refs.push_back(yard::task(add).remote(i, 2));
  auto all = yard::get(refs, 60s);
  for (int i = 0; i < 300; ++i) REQUIRE(*all[i] == i + 2);
  CHECK(pending.peak() <= pending.limit());
  CHECK(pending.peak() == pending.limit());  // it was reached: submitting outran the workers
}

TEST_CASE("malformed bytes to the driver's own socket leave it serving its objects", "[api][robustness]") {
  auto r = yard::put(41);
  auto [id, owner] = yard::detail::export_ref(r.holder());
  REQUIRE_FALSE(owner.empty());
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect("tcp://" + owner);
  std::mt19937 rng(5);
  for (int i = 0; i < 30; ++i) {
    std::string junk(rng() % 200, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    s.send(zmq::buffer(junk), zmq::send_flags::none);
    auto in = yard::test::recv_reply(s);
    REQUIRE(in);
    CHECK(in->env().getBody().isError());
  }
  // Workers still fetch the driver's objects.
  std::vector<yard::ObjectRef<int>> refs{r, yard::put(1)};
  CHECK(*yard::task(sum_refs).remote(refs).get(30s) == 42);
}
