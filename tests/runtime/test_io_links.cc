// The I/O loop's links to its peers (io_loop_links.cc): made on one shared ROUTER, each under a
// routing id of its own; a refused or lost connection fails its requests with the reason; a
// peer restarted at its address is reached again by a new link; lanes to the same peer are
// connections of their own; and a link costs one descriptor.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <future>
#include <thread>

#include "io_loop.h"

using namespace yard::detail;
namespace wire = yard::wire;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A peer that answers GetActor("x") with OK, and holds GetActor("hold") unanswered.
std::unique_ptr<IoLoop> answering_peer(int port = 0) {
  auto loop = std::make_shared<IoLoop*>(nullptr);
  auto io = std::make_unique<IoLoop>("127.0.0.1", port, "the-token", [loop](IoLoop::Incoming in) {
    if (std::string(in.msg->env().getBody().getGetActor().getName().cStr()) == "hold") return;
    OutMessage r("the-token", in.msg->env().getRequestId(), true);
    r.env().getBody().setOk();
    (*loop)->reply(in.routing_id, r.finish());
  });
  *loop = io.get();
  return io;
}

// One request: "ok", or "local: CODE: message".
std::shared_future<std::string> ask(IoLoop& io, const std::string& addr, const std::string& name = "x") {
  auto done = std::make_shared<std::promise<std::string>>();
  uint64_t id = io.next_request_id();
  OutMessage m("the-token", id, false);
  m.env().getBody().initGetActor().setName(name);
  io.request(addr, id, m.finish(), [done](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
    if (e)
      done->set_value("local: " + std::to_string(static_cast<int>(e->code)) + ": " + e->message);
    else
      done->set_value(r->env().getBody().isOk() ? "ok" : "error");
  }, 20000ms);
  return done->get_future().share();
}

std::string answer(const std::shared_future<std::string>& f) {
  REQUIRE(f.wait_for(15s) == std::future_status::ready);
  return f.get();
}

std::string code(wire::ErrorCode c) { return "local: " + std::to_string(static_cast<int>(c)) + ": "; }

int open_descriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

int port_of(const std::string& addr) { return std::stoi(addr.substr(addr.rfind(':') + 1)); }

}  // namespace

TEST_CASE("a request to an address where nothing listens fails at once as refused", "[io][links]") {
  int port;
  {
    auto gone = answering_peer();
    port = port_of(gone->address());
  }
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  auto t0 = Clock::now();
  auto what = answer(ask(io, "127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(what, Catch::StartsWith(code(wire::ErrorCode::UNAVAILABLE)) && Catch::Contains("connection refused"));
  CHECK(Clock::now() - t0 < 10s);  // not the request's deadline
  CHECK(io.link_count() == 0);     // the failed link is gone
}

TEST_CASE("a peer restarted at its address again and again is reached by a new link each time", "[io][links]") {
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  auto peer = answering_peer();
  std::string addr = peer->address();
  for (int round = 0; round < 15; ++round) {
    INFO("round " << round);
    REQUIRE(answer(ask(io, addr)) == "ok");
    auto held = ask(io, addr, "hold");
    REQUIRE(answer(ask(io, addr)) == "ok");  // the held one is in flight on the link now
    peer.reset();                            // the peer's process ends
    CHECK_THAT(answer(held), Catch::StartsWith(code(wire::ErrorCode::WORKER_CRASHED)) && Catch::Contains("was lost"));
    peer = answering_peer(port_of(addr));  // and comes back at the same address
  }
  CHECK(answer(ask(io, addr)) == "ok");
  CHECK(io.link_count() == 1);
}

TEST_CASE("lanes to one peer are links of their own beside its shared link", "[io][links]") {
  auto peer = answering_peer();
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  auto plain = ask(io, peer->address(), "hold");
  auto lane1 = ask(io, peer->address() + "/1");
  auto lane2 = ask(io, peer->address() + "/2");
  CHECK(answer(lane1) == "ok");
  CHECK(answer(lane2) == "ok");
  CHECK(io.link_count() == 3);
  CHECK(plain.wait_for(0s) != std::future_status::ready);  // still held, on its own link
}

TEST_CASE("a link costs one descriptor, however many peers", "[io][links]") {
  constexpr int kPeers = 60;
  std::vector<std::unique_ptr<IoLoop>> peers;
  for (int i = 0; i < kPeers; ++i) peers.push_back(answering_peer());
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  REQUIRE(answer(ask(io, peers[0]->address())) == "ok");  // the shared ROUTER exists
  int before = open_descriptors();
  for (int i = 1; i < kPeers; ++i) REQUIRE(answer(ask(io, peers[i]->address())) == "ok");
  int grown = open_descriptors() - before;
  // Each new link: its connection here and the peer's accepted end (both in this process).
  CHECK(grown <= 2 * (kPeers - 1) + 4);
  CHECK(io.link_count() == kPeers);
}
