// The I/O loop's parts on their own, without a loop thread: its timers and turn hooks, the post
// box other threads hand it work through, a link's outbox, and the table of requests it awaits
// (deadlines, lost links, late and misdirected replies); and the channel through which a process's
// parts reach its loop.
#include <catch2/catch.hpp>

#include <poll.h>

#include <future>
#include <thread>

#include "links.h"
#include "messenger.h"
#include "post_box.h"
#include "requests.h"
#include "timers.h"

using namespace yard::detail;
using namespace std::chrono_literals;

namespace {

bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

Frames ping(const std::string& token, uint64_t id) {
  OutMessage m(token, id, false);
  m.env().getBody().setPing();
  return m.finish();
}

Frames ok_reply(const std::string& token, uint64_t id) {
  OutMessage m(token, id, true);
  m.env().getBody().setOk();
  return m.finish();
}

// A Links and Requests pair over a context of their own, as a loop holds them.
struct Table {
  zmq::context_t ctx{1};
  std::string token = "t0k3n";
  CurveIdentity identity{token};
  ConnectionCount accepted{link_limits()};
  FaultLog faults;
  Requests requests{links, faults, token};
  Links links{ctx, "inproc://parts-test", identity, accepted, faults, requests};
  zmq::socket_t peer{ctx, zmq::socket_type::router};
  std::string addr;
  Table() {
    peer.set(zmq::sockopt::linger, 0);
    peer.bind("tcp://127.0.0.1:*");
    addr = peer.get(zmq::sockopt::last_endpoint).substr(6);
  }
  // Enlists request `id` to the peer; its outcome lands in *got.
  Peer* send(uint64_t id, std::optional<std::optional<LocalError>>* got, std::chrono::milliseconds timeout) {
    ReplyCallback cb = [got](std::unique_ptr<InMessage>, std::optional<LocalError> e) { *got = std::move(e); };
    ReplyLanding none;
    return requests.enlist(addr, id, 64, cb, timeout, none);
  }
};

}  // namespace

TEST_CASE("timers run when due, once or every period, and bound the loop's wait", "[io][parts]") {
  Timers t;
  int once = 0, every = 0;
  t.after(0ms, [&] { ++once; });
  t.every(50ms, [&] { ++every; });
  auto now = Clock::now();
  CHECK(t.wait_until_due(now, 1000ms) == 0ms);  // the one-shot is due
  t.run_due(now + 1ms);
  CHECK(once == 1);
  CHECK(every == 0);
  t.run_due(now + 60ms);
  t.run_due(now + 70ms);  // not due again until 110 ms
  CHECK(once == 1);
  CHECK(every == 1);
  CHECK(t.wait_until_due(now + 70ms, 1000ms) >= 39ms);
  CHECK(t.wait_until_due(now + 70ms, 1000ms) <= 41ms);
  CHECK(t.wait_until_due(now + 70ms, 5ms) == 5ms);
}

TEST_CASE("a turn's end runs the closures queued for it, those they queue too, then the before-sending hook",
          "[io][parts]") {
  Timers t;
  std::vector<std::string> order;
  t.before_sending([&] { order.push_back("before sending"); });
  t.at_turn_end([&] {
    order.push_back("first");
    t.at_turn_end([&] { order.push_back("queued by the first"); });
  });
  t.end_turn();
  CHECK(order == std::vector<std::string>{"first", "queued by the first", "before sending"});
  t.end_turn();  // the closures ran once; the hook every turn
  CHECK(order.size() == 4);
}

TEST_CASE("the post box wakes the loop once per turn, and holds replies made soon for company", "[io][parts]") {
  PostBox box;
  CHECK_FALSE(readable(box.fd(), 0));
  std::vector<int> ran;
  std::thread([&] {
    box.post([&] { ran.push_back(1); });
    box.post([&] { ran.push_back(2); });
  }).join();
  REQUIRE(readable(box.fd(), 1000));
  box.clear_wake();
  CHECK_FALSE(readable(box.fd(), 0));  // two posts, one wake
  auto drained = box.drain();
  for (auto& fn : drained.work) fn();
  CHECK(ran == std::vector<int>{1, 2});

  box.hand_over_reply("a", ping("t", 1), true);  // the first reply held wakes the loop
  REQUIRE(readable(box.fd(), 1000));
  box.clear_wake();
  CHECK(box.drain().replies.size() == 1);
  CHECK(box.hold_until() != Clock::time_point::max());  // replies are held from now
  box.hand_over_reply("a", ping("t", 2), true);
  CHECK_FALSE(readable(box.fd(), 20));  // held: no wake, the hold's end takes it
  while (Clock::now() < box.hold_until()) std::this_thread::yield();
  CHECK(box.drain().replies.size() == 1);  // and the hold goes on
  while (Clock::now() < box.hold_until()) std::this_thread::yield();
  CHECK(box.drain().replies.empty());  // a turn at the hold's end with none ends it
  CHECK(box.hold_until() == Clock::time_point::max());
  box.hand_over_reply("a", ping("t", 3), false);  // not soon: wakes at once
  CHECK(readable(box.fd(), 1000));
}

TEST_CASE("a link's outbox keeps the order of messages written into batches and frames made alone", "[io][parts]") {
  Peer p;
  OutMessage a("t", 1, false);
  a.env().getBody().setPing();
  p.queue_message(a);
  CHECK(p.queued());
  CHECK(p.outbox.empty());  // in the open batch
  p.queue_frames(ping("t", 2));  // the batch so far goes first
  REQUIRE(p.outbox.size() == 2);
  OutMessage c("t", 3, false);
  c.env().getBody().setPing();
  p.queue_message(c);
  p.close_batch();
  REQUIRE(p.outbox.size() == 3);
  std::vector<uint64_t> ids;
  for (auto& frames : p.outbox)
    for (auto& r : received_of(frames)) ids.push_back(std::move(r).open()->env().getRequestId());
  CHECK(ids == std::vector<uint64_t>{1, 2, 3});
}

TEST_CASE("a request past its deadline fails with TIMEOUT and leaves its link idle; a late reply is dropped",
          "[io][parts]") {
  Table t;
  std::optional<std::optional<LocalError>> got;
  Peer* link = t.send(7, &got, 10ms);
  REQUIRE(link);
  CHECK(link->inflight == 1);
  CHECK_FALSE(t.requests.empty());
  t.requests.expire(Clock::now());
  CHECK_FALSE(got);  // not yet due
  t.requests.expire(Clock::now() + 1s);
  REQUIRE(got);
  REQUIRE(*got);
  CHECK((*got)->code == yard::wire::ErrorCode::TIMEOUT);
  CHECK(link->inflight == 0);
  CHECK(t.requests.empty());
  t.requests.on_replies(t.addr, ok_reply(t.token, 7));  // late: nobody waits
  CHECK(t.faults.count() == 0);
}

TEST_CASE("a reply reaches its request once; one without the token or from another peer does not", "[io][parts]") {
  Table t;
  std::optional<std::optional<LocalError>> got;
  REQUIRE(t.send(8, &got, 0ms));
  t.requests.on_replies(t.addr, ok_reply("not the token", 8));
  CHECK_FALSE(got);
  CHECK(t.faults.count() == 1);
  t.requests.on_replies(t.addr, ok_reply(t.token, 8));
  REQUIRE(got);
  CHECK_FALSE(*got);  // a reply, no local error
  CHECK(t.requests.empty());
}

TEST_CASE("a lost link fails its requests with the reason, and only its own", "[io][parts]") {
  Table t;
  std::optional<std::optional<LocalError>> got;
  REQUIRE(t.send(9, &got, 0ms));
  t.requests.on_link_failed("127.0.0.1:1", "elsewhere", yard::wire::ErrorCode::WORKER_CRASHED);
  CHECK_FALSE(got);
  t.requests.on_link_failed(t.addr, "connection to it was lost", yard::wire::ErrorCode::WORKER_CRASHED);
  REQUIRE(got);
  REQUIRE(*got);
  CHECK((*got)->code == yard::wire::ErrorCode::WORKER_CRASHED);
  CHECK((*got)->message == "connection to it was lost");
  CHECK(t.links.count() == 0);  // the link went with it
}

TEST_CASE("a request over the message limit fails at once and is not awaited", "[io][parts]") {
  Table t;
  std::optional<std::optional<LocalError>> got;
  ReplyCallback cb = [&got](std::unique_ptr<InMessage>, std::optional<LocalError> e) { got = std::move(e); };
  ReplyLanding none;
  size_t too_big = static_cast<size_t>(link_limits().max_message_bytes) + 1;
  CHECK_FALSE(t.requests.enlist(t.addr, 10, too_big, cb, 0ms, none));
  REQUIRE(got);
  REQUIRE(*got);
  CHECK((*got)->code == yard::wire::ErrorCode::BAD_REQUEST);
  CHECK(t.requests.empty());
}

TEST_CASE("a channel refuses use before it is opened and after it is closed; open, it is the loop", "[io][channel]") {
  Channel ch;
  Messenger& parts = ch;  // what a submitter or the executor is handed
  CHECK_FALSE(parts.is_open());
  CHECK_FALSE(parts.in_loop());
  CHECK_THROWS_WITH(parts.post([] {}), Catch::Contains("not open"));
  CHECK_THROWS_WITH(parts.next_request_id(), Catch::Contains("not open"));
  auto& loop = ch.open(std::make_unique<IoLoop>("127.0.0.1", 0, "t0k3n", [](Incoming) {}));
  CHECK(parts.is_open());
  CHECK(parts.address() == loop.address());
  CHECK_THROWS_WITH(ch.open(std::make_unique<IoLoop>("127.0.0.1", 0, "t0k3n", [](Incoming) {})),
                    Catch::Contains("already open"));
  std::promise<bool> ran;
  parts.post([&] { ran.set_value(parts.in_loop()); });
  auto f = ran.get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  CHECK(f.get());  // posted work runs on the loop's thread
  ch.close();
  CHECK_FALSE(parts.is_open());
  CHECK_THROWS_WITH(parts.post([] {}), Catch::Contains("not open"));
}
