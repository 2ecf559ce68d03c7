// Batching in the I/O loop: requests made in one turn leave for their peer as one batch in the
// order they were made; every message in a received batch is read, authenticated and answered as
// if it came alone, and a bad one costs only itself.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <set>

#include "io_loop.h"

using namespace yard::detail;
namespace wire = yard::wire;
using namespace std::chrono_literals;

namespace {

Frames ping(const std::string& token, uint64_t id) {
  OutMessage m(token, id, false);
  m.env().getBody().setPing();
  return m.finish();
}

// A request that reaches the listener's handler (a PING is answered by the loop itself).
Frames request(const std::string& token, uint64_t id) {
  OutMessage m(token, id, false);
  m.env().getBody().initGetActor().setName("x");
  return m.finish();
}

// A raw ROUTER standing in for a peer, on a loopback port of its own: its "host:port".
std::string bind_fake(zmq::socket_t& fake) {
  fake.set(zmq::sockopt::linger, 0);
  fake.bind("tcp://127.0.0.1:*");
  return fake.get(zmq::sockopt::last_endpoint).substr(6);
}

// Every envelope that arrives on a raw socket within `deadline`, batches opened, until `want`.
std::vector<std::unique_ptr<InMessage>> receive(zmq::socket_t& s, size_t want, bool routed,
                                                std::string* routing = nullptr) {
  std::vector<std::unique_ptr<InMessage>> got;
  s.set(zmq::sockopt::rcvtimeo, 5000);
  while (got.size() < want) {
    zmq::message_t m;
    if (!s.recv(m)) break;
    if (routed) {
      if (routing) *routing = m.to_string();
      if (!s.recv(m)) break;
    }
    std::vector<Frames> msgs;
    if (is_batch(m)) {
      msgs = unpack_batch(m);
    } else {
      msgs.emplace_back();
      msgs.back().push_back(std::move(m));
    }
    for (auto& f : msgs) got.push_back(std::make_unique<InMessage>(std::move(f)));
  }
  return got;
}

}  // namespace

TEST_CASE("requests made in one turn leave as one batch, in order, and batched replies reach each caller",
          "[io][batch]") {
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::router);
  std::string addr = bind_fake(fake);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});

  constexpr int kCalls = 50;
  std::vector<uint64_t> ids;
  for (int i = 0; i < kCalls; ++i) ids.push_back(io.next_request_id());
  auto answered = std::make_shared<std::vector<std::promise<std::string>>>(kCalls);
  io.post([&, answered] {
    for (int i = 0; i < kCalls; ++i)
      io.request(addr, ids[i], ping("the-token", ids[i]), [answered, i](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
        (*answered)[i].set_value(e ? "local: " + e->message : r->env().getBody().isOk() ? "ok" : "error");
      }, 5000ms);
  });
  // One message arrives, a batch, holding the requests in the order they were made.
  zmq::message_t rid, body;
  fake.set(zmq::sockopt::rcvtimeo, 5000);
  REQUIRE(fake.recv(rid));
  REQUIRE(fake.recv(body));
  REQUIRE(is_batch(body));
  auto reqs = unpack_batch(body);
  REQUIRE(reqs.size() == kCalls);
  for (int i = 0; i < kCalls; ++i) CHECK(InMessage(std::move(reqs[i])).env().getRequestId() == ids[i]);

  // The answers come back as one batch, in reverse order, one of them without the token and one
  // not an envelope at all: those two are dropped and counted, the rest delivered.
  std::vector<Frames> replies;
  for (int i = kCalls - 1; i >= 0; --i) {
    OutMessage r(i == 7 ? "guessed" : "the-token", ids[i], true);
    r.env().getBody().setOk();
    replies.push_back(r.finish());
  }
  replies[3].clear();
  replies[3].emplace_back(std::string(16, '\x01').data(), 16);  // in place of the reply to call 46
  uint64_t faults = io.malformed_count();
  fake.send(rid, zmq::send_flags::sndmore);
  fake.send(pack_batch(replies, 0, replies.size()), zmq::send_flags::none);
  for (int i = 0; i < kCalls; ++i) {
    auto fut = (*answered)[i].get_future();
    if (i == 7 || i == kCalls - 1 - 3) {
      CHECK_THAT(fut.get(), Catch::StartsWith("local: no reply"));  // its reply was dropped
    } else {
      REQUIRE(fut.wait_for(5s) == std::future_status::ready);
      CHECK(fut.get() == "ok");
    }
  }
  CHECK(io.malformed_count() == faults + 2);
}

TEST_CASE("each request in a received batch is answered as if it came alone", "[io][batch]") {
  std::atomic<int> handled{0};
  IoLoop* loop = nullptr;
  IoLoop io("127.0.0.1", 0, "the-token", [&](IoLoop::Incoming in) {
    ++handled;
    OutMessage r("the-token", in.msg->env().getRequestId(), true);
    r.env().getBody().setOk();
    loop->reply(in.routing_id, r.finish());
  });
  loop = &io;
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect("tcp://" + io.address());

  std::vector<Frames> batch;
  batch.push_back(request("the-token", 1));
  batch.emplace_back();
  batch.back().emplace_back(std::string(16, '\x02').data(), 16);  // not an envelope
  batch.push_back(request("wrong", 3));
  batch.push_back(request("the-token", 4));
  s.send(pack_batch(batch, 0, batch.size()), zmq::send_flags::none);
  auto got = receive(s, 4, false);
  REQUIRE(got.size() == 4);
  std::map<uint64_t, std::string> by_id;
  for (auto& m : got) {
    auto b = m->env().getBody();
    by_id[m->env().getRequestId()] = b.isOk() ? "ok" : code_name(b.getError().getCode());
  }
  CHECK(by_id[1] == "ok");
  CHECK(by_id[4] == "ok");
  CHECK(by_id[3] == "unauthenticated");
  CHECK(by_id[0] == "bad request");  // the one that was not an envelope (its id unknown)
  CHECK(handled == 2);

  // A batch whose lengths do not add up gets one refusal; the loop serves the next request.
  std::string bad(static_cast<const char*>(pack_batch(batch, 0, 1).data()), 16);
  s.send(zmq::buffer(bad), zmq::send_flags::none);
  auto refusal = receive(s, 1, false);
  REQUIRE(refusal.size() == 1);
  REQUIRE(refusal[0]->env().getBody().isError());
  CHECK(refusal[0]->env().getBody().getError().getCode() == wire::ErrorCode::BAD_REQUEST);
  s.send(request("the-token", 9)[0], zmq::send_flags::none);
  auto last = receive(s, 1, false);
  REQUIRE(last.size() == 1);
  CHECK(last[0]->env().getRequestId() == 9);
  CHECK(last[0]->env().getBody().isOk());
}

TEST_CASE("replies held for company (reply_soon) still leave within the hold", "[io][batch]") {
  // The loop hands its requests to this thread, which answers them as an executor does.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<IoLoop::Incoming> inbox;
  IoLoop io("127.0.0.1", 0, "the-token", [&](IoLoop::Incoming in) {
    std::lock_guard<std::mutex> l(mu);
    inbox.push_back(std::move(in));
    cv.notify_all();
  });
  auto take = [&](size_t n) {
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, 5s, [&] { return inbox.size() >= n; }));
    std::vector<IoLoop::Incoming> got;
    for (size_t i = 0; i < n; ++i) {
      got.push_back(std::move(inbox.front()));
      inbox.pop_front();
    }
    return got;
  };
  auto ok = [&](IoLoop::Incoming& in) {
    OutMessage r("the-token", in.msg->env().getRequestId(), true);
    r.env().getBody().setOk();
    return r.finish();
  };
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect("tcp://" + io.address());

  // A burst answered one after another: every reply arrives.
  std::vector<Frames> batch;
  for (uint64_t id = 1; id <= 20; ++id) batch.push_back(request("the-token", id));
  s.send(pack_batch(batch, 0, batch.size()), zmq::send_flags::none);
  auto calls = take(20);
  for (auto& c : calls) io.reply_soon(c.routing_id, ok(c));
  auto got = receive(s, 20, false);
  REQUIRE(got.size() == 20);
  std::set<uint64_t> ids;
  for (auto& m : got) ids.insert(m->env().getRequestId());
  CHECK(ids.size() == 20);

  // A reply made while others are held, with nothing else to wake the loop, is not left for the
  // loop's idle wake (a second): it leaves at the end of the hold.
  s.send(pack_batch(batch, 0, 2), zmq::send_flags::none);
  calls = take(2);
  io.reply_soon(calls[0].routing_id, ok(calls[0]));
  io.reply_soon(calls[1].routing_id, ok(calls[1]));
  auto t0 = std::chrono::steady_clock::now();
  got = receive(s, 2, false);
  REQUIRE(got.size() == 2);
  CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
}

TEST_CASE("requests written straight into their batch keep their order among those made as frames, and a "
          "full batch is followed by the next",
          "[io][batch]") {
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::router);
  std::string addr = bind_fake(fake);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});

  // 4 KiB requests enough for more than two batches, every 7th made as frames, and one larger
  // than a batch holds: all leave in the order they were made.
  const size_t cap = batch_cap();
  const int calls = static_cast<int>(2 * cap / 4096) + 40;
  const int big = calls / 2;
  std::string bytes(cap + 1000, 'x');
  std::vector<uint64_t> ids;
  for (int i = 0; i < calls; ++i) ids.push_back(io.next_request_id());
  auto none = [](std::unique_ptr<InMessage>, std::optional<LocalError>) {};
  io.post([&] {
    for (int i = 0; i < calls; ++i) {
      if (i % 7 == 3) {
        io.request(addr, ids[i], request("the-token", ids[i]), none, 5000ms);
        continue;
      }
      OutMessage m("the-token", ids[i], false);
      auto args = m.env().getBody().initPushTask().initArgs(1);
      args[0].setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), i == big ? cap + 1000 : 4096));
      io.request(addr, ids[i], m, none, 5000ms);
    }
  });
  fake.set(zmq::sockopt::rcvtimeo, 5000);
  std::vector<uint64_t> got;
  int batches = 0;
  bool big_alone = false;
  while (got.size() < ids.size()) {
    zmq::message_t rid, m;
    REQUIRE(fake.recv(rid));
    REQUIRE(fake.recv(m));
    CHECK_FALSE(m.more());
    if (!is_batch(m)) {
      Frames f;
      f.push_back(std::move(m));
      InMessage in(std::move(f));
      got.push_back(in.env().getRequestId());
      big_alone = big_alone || got.back() == ids[big];
      continue;
    }
    ++batches;
    CHECK(m.size() <= cap);
    for (auto& f : unpack_batch(m)) got.push_back(InMessage(std::move(f)).env().getRequestId());
  }
  CHECK(got == ids);
  CHECK(big_alone);
  CHECK(batches >= 3);
}

TEST_CASE("a group of replies reaches each caller; a reply to another peer's request, one that is not a reply, and a "
          "group without the token are dropped and counted",
          "[io][batch]") {
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::router), other(ctx, zmq::socket_type::router);
  std::string addr = bind_fake(fake), other_addr = bind_fake(other);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});

  constexpr int kCalls = 6;  // the last goes to the other peer
  std::vector<uint64_t> ids;
  for (int i = 0; i < kCalls; ++i) ids.push_back(io.next_request_id());
  auto answered = std::make_shared<std::vector<std::promise<std::string>>>(kCalls);
  io.post([&, answered] {
    for (int i = 0; i < kCalls; ++i)
      io.request(i + 1 < kCalls ? addr : other_addr, ids[i], request("the-token", ids[i]),
                 [answered, i](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
                   if (e) return (*answered)[i].set_value("local: " + e->message);
                   auto body = r->env().getBody();
                   (*answered)[i].set_value(body.isStatusReply() ? std::string(body.getStatusReply()) : "other");
                 },
                 i == 0 ? 1500ms : 10000ms);
  });
  std::string rid, other_rid;
  REQUIRE(receive(fake, kCalls - 1, true, &rid).size() == kCalls - 1);
  REQUIRE(receive(other, 1, true, &other_rid).size() == 1);
  auto send_group = [&](zmq::socket_t& s, const std::string& to, ReplyGroup& g) {
    s.send(zmq::buffer(to), zmq::send_flags::sndmore);
    s.send(g.take(), zmq::send_flags::none);
  };
  uint64_t faults = io.malformed_count();
  // Without the token: nothing of it is taken.
  ReplyGroup guessed("guessed");
  guessed.add(ids[1]).getBody().setStatusReply("guessed");
  send_group(fake, rid, guessed);
  // The peer's replies in reverse order, with one to the other peer's request and, for call 0,
  // an envelope not marked a reply.
  ReplyGroup g("the-token");
  for (int i = kCalls - 2; i >= 1; --i) g.add(ids[i]).getBody().setStatusReply("r" + std::to_string(i));
  g.add(ids[kCalls - 1]).getBody().setStatusReply("stolen");
  auto not_reply = g.add(ids[0]);
  not_reply.setIsReply(false);
  not_reply.getBody().setStatusReply("r0");
  send_group(fake, rid, g);
  for (int i = 1; i + 1 < kCalls; ++i) {
    auto fut = (*answered)[i].get_future();
    REQUIRE(fut.wait_for(5s) == std::future_status::ready);
    CHECK(fut.get() == "r" + std::to_string(i));
  }
  auto first = (*answered)[0].get_future();
  CHECK_THAT(first.get(), Catch::StartsWith("local: no reply"));  // its reply was dropped
  // The other peer's request still waits for its own answer.
  ReplyGroup own("the-token");
  own.add(ids[kCalls - 1]).getBody().setStatusReply("own");
  send_group(other, other_rid, own);
  auto last = (*answered)[kCalls - 1].get_future();
  REQUIRE(last.wait_for(5s) == std::future_status::ready);
  CHECK(last.get() == "own");
  CHECK(io.malformed_count() == faults + 3);
}
