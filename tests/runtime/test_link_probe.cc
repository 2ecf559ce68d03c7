// The I/O loop watches the links that owe it replies: a peer silent for a while is sent a PING;
// one that answers it stays, however long its real answer takes; one that answers nothing for the
// silence limit is taken for gone and its requests fail with the reason. Idle links are not
// watched at all (no heartbeat per link).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "io_loop.h"

using namespace yard::detail;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A raw ROUTER standing in for a peer: counts the PINGs it gets and answers them if told to, and
// answers every other request `hold` after it came (never, if hold is zero).
struct FakePeer {
  zmq::context_t ctx;
  zmq::socket_t router{ctx, zmq::socket_type::router};
  std::string addr;
  std::atomic<int> pings{0}, requests{0};
  std::atomic<bool> stop{false};
  std::thread t;

  FakePeer(bool answer_pings, std::chrono::milliseconds hold) {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::rcvtimeo, 20);
    router.bind("tcp://127.0.0.1:*");
    addr = router.get(zmq::sockopt::last_endpoint).substr(6);
    t = std::thread([this, answer_pings, hold] {
      std::vector<std::pair<Clock::time_point, std::pair<std::string, uint64_t>>> held;
      while (!stop) {
        zmq::message_t rid, body;
        if (router.recv(rid)) {
          if (!router.recv(body)) continue;
          Frames frames;
          frames.push_back(std::move(body));
          for (auto& r : received_of(frames)) {
            auto in = std::move(r).open();
            uint64_t id = in->env().getRequestId();
            if (in->env().getBody().isPing()) {
              ++pings;
              if (answer_pings) answer(rid.to_string(), id);
            } else {
              ++requests;
              if (hold.count() > 0) held.push_back({Clock::now() + hold, {rid.to_string(), id}});
            }
          }
        }
        for (auto it = held.begin(); it != held.end();)
          if (Clock::now() >= it->first) {
            answer(it->second.first, it->second.second);
            it = held.erase(it);
          } else {
            ++it;
          }
      }
    });
  }
  void answer(const std::string& routing, uint64_t id) {
    OutMessage m("the-token", id, true);
    m.env().getBody().setOk();
    auto frames = m.finish();
    router.send(zmq::buffer(routing), zmq::send_flags::sndmore);
    router.send(frames[0], zmq::send_flags::none);
  }
  ~FakePeer() {
    stop = true;
    t.join();
  }
};

// One request to `addr` with a deadline far away: what came back, and when.
std::pair<std::string, double> ask(IoLoop& io, const std::string& addr) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto fut = done->get_future();
  uint64_t id = io.next_request_id();
  OutMessage m("the-token", id, false);
  m.env().getBody().initGetActor().setName("x");
  auto t0 = Clock::now();
  io.request(addr, id, m.finish(), [done](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
    done->set_value(e ? "local: " + e->message : r->env().getBody().isOk() ? "ok" : "error");
  }, 60000ms);
  REQUIRE(fut.wait_for(30s) == std::future_status::ready);
  return {fut.get(), std::chrono::duration<double>(Clock::now() - t0).count()};
}

}  // namespace

TEST_CASE("a peer that owes a reply and answers nothing, PINGs included, is given up after the silence limit",
          "[io][probe]") {
  FakePeer frozen(false, 0ms);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  io.set_silence_limit(800ms);
  auto [what, took] = ask(io, frozen.addr);
  CHECK_THAT(what, Catch::Contains("has not answered for 800 ms") && Catch::Contains("PING"));
  CHECK(took >= 0.8);
  CHECK(took < 10);  // not the request's own 60 s deadline
  CHECK(frozen.requests == 1);
  CHECK(frozen.pings >= 1);
}

TEST_CASE("a peer that answers PINGs keeps a request alive well past the silence limit", "[io][probe]") {
  FakePeer slow(true, 2400ms);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  io.set_silence_limit(800ms);
  auto [what, took] = ask(io, slow.addr);
  CHECK(what == "ok");
  CHECK(took >= 2.4);
  CHECK(slow.pings >= 2);  // asked about every quarter of the limit while it said nothing
  // An idle link is not probed: nothing more reaches the peer while nothing is owed.
  int after = slow.pings;
  std::this_thread::sleep_for(1200ms);  // the window watched for probes: over a second, idle
  CHECK(slow.pings == after);
}

TEST_CASE("an I/O loop answers PING itself, whatever its handler does", "[io][probe]") {
  std::atomic<int> handled{0};
  IoLoop server("127.0.0.1", 0, "the-token", [&](IoLoop::Incoming) { ++handled; });  // answers nothing
  IoLoop client("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  uint64_t id = client.next_request_id();
  OutMessage m("the-token", id, false);
  m.env().getBody().setPing();
  auto r = client.call(server.address(), m, id, 10000ms);
  CHECK(r->env().getBody().isOk());
  CHECK(handled == 0);
}

TEST_CASE("at its most links, a loop closes the least recently used idle ones before making another",
          "[io][probe]") {
  std::vector<std::unique_ptr<FakePeer>> peers;
  for (int i = 0; i < 6; ++i) peers.push_back(std::make_unique<FakePeer>(true, 1ms));
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  io.set_max_links(4);
  for (int i = 0; i < 4; ++i) CHECK(ask(io, peers[i]->addr).first == "ok");
  CHECK(io.link_count() == 4);
  CHECK(ask(io, peers[0]->addr).first == "ok");  // peer 0 used again: peer 1 is now the oldest
  CHECK(ask(io, peers[4]->addr).first == "ok");  // the fifth link: the oldest idle one goes
  CHECK(io.link_count() == 4);
  CHECK(ask(io, peers[5]->addr).first == "ok");
  CHECK(io.link_count() <= 4);
  // Closed links are made again when used.
  CHECK(ask(io, peers[1]->addr).first == "ok");
  CHECK(peers[1]->requests == 2);
}

TEST_CASE("a link unused for the idle time is closed, and made again on the next request", "[io][probe]") {
  FakePeer peer(true, 1ms);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  io.set_idle_link(400ms);
  CHECK(ask(io, peer.addr).first == "ok");
  CHECK(io.link_count() == 1);
  auto deadline = Clock::now() + 10s;
  while (io.link_count() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  CHECK(io.link_count() == 0);
  CHECK(ask(io, peer.addr).first == "ok");
  CHECK(io.link_count() == 1);
  CHECK(peer.requests == 2);
}
