// A non-concurrent actor's calls come to a port of their own, owned by the executor thread
// (call_port.h): calls are taken in the order they came and answered from the port, as one
// message (a group of replies) when several are answered at once; a long call does not make the worker look frozen (the port
// still answers probes); what is not an actor call, or lacks the token, is refused there.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "call_port.h"

using namespace yard::detail;
namespace wire = yard::wire;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "the-token";

struct Answer {
  std::string what;  // "ok", "error CODE: message" or "local: message"
  std::string task;  // an ok reply's task id (echoed in its error's message slot by the executor)
};

// A reply's callback that gives its answer to `done`.
ReplyCallback answer_to(std::shared_ptr<std::promise<Answer>> done) {
  return [done](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
    if (e) return done->set_value({"local: " + e->message, ""});
    auto body = r->env().getBody();
    if (body.isError()) return done->set_value({"error " + describe(body.getError()), ""});
    done->set_value({"ok", body.isActorInfo() ? std::string(body.getActorInfo().getActorId()) : ""});
  };
}

// Sends a request built by `fill` to `addr`; its answer arrives in the future.
std::future<Answer> send(IoLoop& io, const std::string& addr, const std::function<void(wire::Envelope::Builder)>& fill,
                         const std::string& token = kToken) {
  auto done = std::make_shared<std::promise<Answer>>();
  auto fut = done->get_future();
  uint64_t id = io.next_request_id();
  OutMessage m(token, id, false);
  fill(m.env());
  io.request(addr, id, m.finish(), answer_to(done), 60000ms);
  return fut;
}

// `n` calls sent together as one message (pushTasks), each a request of its own; the call at
// `no_actor` names no actor.
std::vector<std::future<Answer>> send_together(IoLoop& io, const std::string& addr, int n, int no_actor = -1) {
  OutMessage m(kToken, 0, false);
  auto list = m.env().getBody().initPushTasks(static_cast<unsigned>(n));
  std::vector<std::pair<uint64_t, ReplyCallback>> calls;
  std::vector<std::future<Answer>> answers;
  for (int i = 0; i < n; ++i) {
    auto pt = list[static_cast<unsigned>(i)];
    uint64_t id = io.next_request_id();
    pt.setRequestId(id);
    pt.setTaskId("g" + std::to_string(i));
    pt.setFunction("Counter.incr");
    if (i != no_actor) pt.setActorId("actor-1");
    auto done = std::make_shared<std::promise<Answer>>();
    answers.push_back(done->get_future());
    calls.emplace_back(id, answer_to(done));
  }
  io.request_group(addr, m, std::move(calls), 60000ms);
  return answers;
}

auto call(const std::string& task) {
  return [task](wire::Envelope::Builder env) {
    auto pt = env.getBody().initPushTask();
    pt.setTaskId(task);
    pt.setFunction("Counter.incr");
    pt.setActorId("actor-1");
  };
}

// The executor's side: takes `n` calls, answering each with its task id (in an ActorInfo's
// actor id), each run by `run` between call_begins and call_ends; most replies join the group
// held for their requester, every fifth travels alone.
// With one call of look-ahead, as the executor: a reply waits for the next ones while a call is
// already there behind it.
void serve(CallPort& port, int n, const std::function<void()>& run = [] {}) {
  IoLoop::Incoming in, next;
  bool have_next = false;
  for (int i = 0; i < n;) {
    if (have_next)
      in = std::move(next);
    else if (!port.next(in))
      continue;
    have_next = i + 1 < n && port.next(next, false);
    REQUIRE(in.reply_to == &port);
    port.call_begins();
    run();
    port.call_ends();
    std::string task = in.push_task().getTaskId();
    if (i % 5 == 4) {  // a reply that travels alone, after the group held
      OutMessage m(kToken, in.request_id(), true);
      m.env().getBody().initActorInfo().setActorId(task);
      port.reply(in, m, have_next);
    } else {
      port.group_reply(in).getBody().initActorInfo().setActorId(task);
      port.replied(have_next);
    }
    ++i;
  }
}

template <class P>
bool eventually(P p, std::chrono::milliseconds limit = 10s) {
  auto until = Clock::now() + limit;
  while (!p()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("a call port takes calls in the order they came and answers them from the executor", "[quick][call_port]") {
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  REQUIRE(port.address() != worker.address());
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  const int n = 2000;
  std::vector<std::future<Answer>> answers;
  for (int i = 0; i < n; ++i) answers.push_back(send(caller, port.address(), call("t" + std::to_string(i))));
  std::thread executor([&] { serve(port, n); });
  executor.join();
  for (int i = 0; i < n; ++i) {
    REQUIRE(answers[i].wait_for(30s) == std::future_status::ready);
    auto a = answers[i].get();
    REQUIRE(a.what == "ok");
    REQUIRE(a.task == "t" + std::to_string(i));
  }
}

TEST_CASE("a call port answers probes while its executor runs a long call", "[quick][call_port]") {
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  caller.set_silence_limit(600ms);  // probed after 150 ms of silence, given up after 600
  auto t0 = Clock::now();
  auto a = send(caller, port.address(), call("long"));
  // The call's own work: 1.5 s, longer than the caller waits for a silent peer.
  std::thread executor([&] { serve(port, 1, [] { std::this_thread::sleep_for(1500ms); }); });
  executor.join();
  REQUIRE(a.wait_for(30s) == std::future_status::ready);
  auto got = a.get();
  CHECK(got.what == "ok");
  CHECK(Clock::now() - t0 >= 1500ms);
}

TEST_CASE("a call port held by a busy executor outside a call is taken for frozen", "[quick][call_port]") {
  // The counterpart of the test above: without call_begins, nobody answers the probes.
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  caller.set_silence_limit(600ms);
  auto a = send(caller, port.address(), call("stuck"));
  IoLoop::Incoming in;
  REQUIRE(port.next(in));
  REQUIRE(a.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(a.get().what, Catch::StartsWith("local: ") && Catch::Contains("has not answered"));
}

TEST_CASE("a call port refuses requests that are not actor calls or lack the token, and goes on serving",
          "[quick][call_port]") {
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  auto not_a_call = send(caller, port.address(), [](wire::Envelope::Builder env) { env.getBody().initGetActor().setName("x"); });
  auto a_task = send(caller, port.address(), [](wire::Envelope::Builder env) {
    env.getBody().initPushTask().setTaskId("no-actor");
  });
  auto no_token = send(caller, port.address(), call("wrong"), "not-the-token");
  std::thread executor([&] { serve(port, 1); });
  auto good = send(caller, port.address(), call("after"));
  executor.join();
  REQUIRE(not_a_call.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(not_a_call.get().what, Catch::Contains("bad request") && Catch::Contains("only actor calls"));
  REQUIRE(a_task.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(a_task.get().what, Catch::Contains("only actor calls"));
  REQUIRE(no_token.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(no_token.get().what, Catch::Contains("unauthenticated") && Catch::Contains("wrong cluster token"));
  REQUIRE(good.wait_for(30s) == std::future_status::ready);
  CHECK(good.get().task == "after");
  CHECK(eventually([&] { return worker.malformed_count() >= 3; }));
}

TEST_CASE("a call port's wake lets its executor look elsewhere", "[quick][call_port]") {
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  std::atomic<int> result{-1};
  std::thread executor([&] {
    IoLoop::Incoming in;
    result = port.next(in) ? 1 : 0;
  });
  port.wake();
  executor.join();
  CHECK(result == 0);
}

TEST_CASE("calls sent together (pushTasks) are taken in order and answered each alone; a bad one is refused alone",
          "[quick][call_port]") {
  IoLoop worker("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  CallPort port(worker, "127.0.0.1");
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  const int n = 300;
  auto answers = send_together(caller, port.address(), n, 7);
  std::thread executor([&] { serve(port, n - 1); });
  executor.join();
  for (int i = 0; i < n; ++i) {
    REQUIRE(answers[i].wait_for(30s) == std::future_status::ready);
    auto a = answers[i].get();
    if (i == 7) {
      CHECK_THAT(a.what, Catch::Contains("a call port answers only actor calls"));
    } else {
      REQUIRE(a.what == "ok");
      CHECK(a.task == "g" + std::to_string(i));
    }
  }
  // A message with no calls is refused as a whole, by its own request id.
  auto empty = send(caller, port.address(), [](wire::Envelope::Builder env) { env.getBody().initPushTasks(0); });
  REQUIRE(eventually([&] {  // the executor's look at its port takes and refuses it
    IoLoop::Incoming in;
    CHECK_FALSE(port.next(in, false));
    return empty.wait_for(0s) == std::future_status::ready;
  }));
  CHECK_THAT(empty.get().what, Catch::Contains("a call port answers only actor calls"));
  CHECK(eventually([&] { return worker.malformed_count() == 2; }));  // counted on the loop's thread
}

TEST_CASE("an I/O loop hands each call of a pushTasks to its handler as a request of its own", "[quick][call_port]") {
  std::mutex mu;
  std::vector<std::string> seen;  // "task id/request id", in the order handled
  IoLoop* self = nullptr;
  IoLoop worker("127.0.0.1", 0, kToken, [&](IoLoop::Incoming in) {
    {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(std::string(in.push_task().getTaskId()) + "/" + std::to_string(in.request_id()));
    }
    OutMessage m(kToken, in.request_id(), true);
    m.env().getBody().initActorInfo().setActorId(std::string(in.push_task().getTaskId()));
    self->reply(in.routing_id, m.finish());
  });
  self = &worker;
  IoLoop caller("127.0.0.1", 0, kToken, [](IoLoop::Incoming) {});
  auto answers = send_together(caller, worker.address(), 50);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(answers[i].wait_for(30s) == std::future_status::ready);
    CHECK(answers[i].get().task == "g" + std::to_string(i));
  }
  std::lock_guard<std::mutex> l(mu);
  REQUIRE(seen.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(seen[i].rfind("g" + std::to_string(i) + "/", 0) == 0);
}
