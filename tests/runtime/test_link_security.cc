// Link security inside one process: the cluster's CURVE keys, the ZAP verdict, bounded fault
// logs, and replies authenticated as requests are (a reply without the token never delivers a
// value). Encrypted links between hosts are tested across network namespaces (netns_test.sh).
#include <catch2/catch.hpp>

#include <future>

#include "io_loop.h"
#include "link_limits.h"
#include "link_security.h"

using namespace yard::detail;
namespace wire = yard::wire;
using namespace std::chrono_literals;

TEST_CASE("the cluster's CURVE keys follow from its token alone", "[security]") {
  auto a = curve_keys_for("token-one"), b = curve_keys_for("token-one"), c = curve_keys_for("token-two");
  CHECK(a.public_z85 == b.public_z85);
  CHECK(a.secret_z85 == b.secret_z85);
  CHECK(a.public_z85 != c.public_z85);
  CHECK(a.public_z85.size() == 40);
  CHECK(a.public_z85 != a.secret_z85);
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.3.4.5"));
  CHECK(is_loopback_host("localhost"));
  CHECK(!is_loopback_host("10.77.1.1"));
  CHECK(host_of("10.77.1.1:4000") == "10.77.1.1");
}

TEST_CASE("the ZAP handler admits the cluster's key only", "[security]") {
  auto keys = curve_keys_for("t");
  uint8_t pub[32];
  REQUIRE(zmq_z85_decode(pub, keys.public_z85.c_str()));
  auto request = [&](std::string mechanism, std::string key) {
    std::vector<zmq::message_t> r;
    for (std::string f : {std::string("1.0"), std::string("7"), std::string("yard"), std::string("10.0.0.9"),
                          std::string(), mechanism, key})
      r.emplace_back(f.data(), f.size());
    return r;
  };
  std::string addr;
  CHECK(!zap_verdict(request("CURVE", std::string(reinterpret_cast<char*>(pub), 32)), keys.public_z85, &addr));
  CHECK(addr == "10.0.0.9");
  auto other = curve_keys_for("another token");
  uint8_t opub[32];
  REQUIRE(zmq_z85_decode(opub, other.public_z85.c_str()));
  auto no = zap_verdict(request("CURVE", std::string(reinterpret_cast<char*>(opub), 32)), keys.public_z85, &addr);
  REQUIRE(no);
  CHECK_THAT(*no, Catch::Contains("wrong cluster token"));
  CHECK(zap_verdict(request("NULL", ""), keys.public_z85, &addr));
  CHECK(zap_verdict(request("CURVE", "short"), keys.public_z85, &addr));
  CHECK(zap_verdict({}, keys.public_z85, &addr));
}

TEST_CASE("faults are logged at a bounded rate per peer, and counted", "[security]") {
  PeerFaults f(std::chrono::seconds(30));
  auto t0 = PeerFaults::Clock::now();
  int lines = 0;
  for (int i = 0; i < 25000; ++i) lines += f.note("10.0.0.9", "junk", t0 + std::chrono::milliseconds(i)).has_value();
  CHECK(lines == 1);
  CHECK(f.total() == 25000);
  auto later = f.note("10.0.0.9", "junk", t0 + std::chrono::seconds(31));
  REQUIRE(later);
  CHECK_THAT(*later, Catch::Contains("25001 so far") && Catch::Contains("24999 not logged"));
  CHECK(f.note("10.0.0.10", "junk", t0));  // another peer has its own line
  // Thousands of peers cost bounded memory: past the bound they share one entry.
  for (int i = 0; i < 5000; ++i) f.note("peer-" + std::to_string(i), "junk", t0);
  CHECK(f.note("peer-4999", "junk", t0 + std::chrono::seconds(100)));
  CHECK_THAT(f.note("peer-4998", "junk", t0 + std::chrono::seconds(200)).value_or(""), Catch::Contains("from others"));
}

TEST_CASE("a reply without the cluster token delivers nothing; a refusal without it fails the request", "[security]") {
  // A raw ROUTER stands in for a peer that answers with a guessed request id.
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::router);
  fake.set(zmq::sockopt::linger, 0);
  fake.bind("tcp://127.0.0.1:*");
  std::string ep = fake.get(zmq::sockopt::last_endpoint);
  std::string addr = ep.substr(6);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  auto send_and_answer = [&](const std::string& reply_token, wire::ErrorCode code, bool error) {
    uint64_t id = io.next_request_id();
    OutMessage req("the-token", id, false);
    req.env().getBody().setPing();
    auto got = std::make_shared<std::promise<std::string>>();
    io.request(addr, id, req.finish(), [got](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
      if (e) got->set_value("local: " + e->message);
      else if (r->env().getBody().isError()) got->set_value("error: " + std::string(r->env().getBody().getError().getMessage()));
      else got->set_value("value");
    }, 1500ms);
    zmq::message_t rid, body;
    REQUIRE(fake.recv(rid));
    REQUIRE(fake.recv(body));
    OutMessage rep(reply_token, id, true);
    if (error) set_error(rep.env(), code, "refused");
    else rep.env().getBody().setOk();
    auto frames = rep.finish();
    fake.send(rid, zmq::send_flags::sndmore);
    fake.send(frames[0], zmq::send_flags::none);
    return got->get_future().get();
  };
  CHECK(send_and_answer("the-token", wire::ErrorCode::INTERNAL, false) == "value");
  uint64_t before = io.malformed_count();
  CHECK_THAT(send_and_answer("guessed", wire::ErrorCode::INTERNAL, false), Catch::StartsWith("local: no reply"));
  CHECK_THAT(send_and_answer("", wire::ErrorCode::INTERNAL, false), Catch::StartsWith("local: no reply"));
  CHECK_THAT(send_and_answer("", wire::ErrorCode::TASK_ERROR, true), Catch::StartsWith("local: no reply"));
  CHECK(io.malformed_count() == before + 3);
  CHECK(send_and_answer("", wire::ErrorCode::UNAUTHENTICATED, true) == "error: refused");
}

TEST_CASE("connections are counted per peer; one past a peer's limit or the total is refused", "[security][limits]") {
  LinkLimits l;
  l.max_connections_per_peer = 3;
  l.max_connections = 4;
  ConnectionCount c(l);
  for (int fd = 10; fd < 13; ++fd) CHECK_FALSE(c.accept(fd, "10.0.0.1"));
  auto why = c.accept(13, "10.0.0.1");
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("10.0.0.1 already has 3 open connections") &&
                       Catch::Contains("YARD_MAX_CONNECTIONS_PER_PEER"));
  CHECK(c.open("10.0.0.1") == 3);
  CHECK_FALSE(c.accept(20, "10.0.0.2"));  // another peer has room
  c.closed(13);                            // a refused one was never counted
  CHECK(c.open("10.0.0.1") == 3);
  c.closed(10);
  CHECK(c.open("10.0.0.1") == 2);
  CHECK_FALSE(c.accept(10, "10.0.0.1"));
  CHECK(c.total() == 4);
  auto full = c.accept(30, "10.0.0.3");  // the process's total
  REQUIRE(full);
  CHECK_THAT(*full, Catch::Contains("4 open connections"));
  CHECK(c.open("10.0.0.3") == 0);
  // A descriptor reused before its close was heard of counts once, for its new peer.
  CHECK_FALSE(c.accept(20, "10.0.0.1") == std::nullopt);  // 10.0.0.1 is full again
  c.closed(11);
  CHECK_FALSE(c.accept(20, "10.0.0.1"));
  CHECK(c.open("10.0.0.2") == 0);
  CHECK(c.total() == 3);
}

TEST_CASE("a request over the message size limit fails at once with the limit named, and sends nothing", "[security][limits]") {
  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::router);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 300);
  peer.bind("tcp://127.0.0.1:*");
  std::string addr = peer.get(zmq::sockopt::last_endpoint).substr(6);
  IoLoop io("127.0.0.1", 0, "the-token", [](IoLoop::Incoming) {});
  uint64_t id = io.next_request_id();
  OutMessage req("the-token", id, false);
  req.env().getBody().setPing();
  auto frames = req.finish();
  // One byte over the limit; never written to, so it costs address space, not memory.
  frames.emplace_back(static_cast<size_t>(link_limits().max_message_bytes) + 1);
  auto got = std::make_shared<std::promise<std::optional<LocalError>>>();
  io.request(addr, id, std::move(frames),
             [got](std::unique_ptr<InMessage>, std::optional<LocalError> e) { got->set_value(e); }, 5000ms);
  auto fut = got->get_future();
  REQUIRE(fut.wait_for(2s) == std::future_status::ready);
  auto e = fut.get();
  REQUIRE(e);
  CHECK(e->code == wire::ErrorCode::BAD_REQUEST);
  CHECK_THAT(e->message, Catch::Contains("over the limit of " + std::to_string(link_limits().max_message_bytes)) &&
                             Catch::Contains("YARD_MAX_MESSAGE_BYTES") && Catch::Contains(addr));
  zmq::message_t m;
  CHECK_FALSE(peer.recv(m));  // nothing arrived
}

TEST_CASE("the web key follows from the token, and is not the token", "[security]") {
  auto k = web_key_for("token-one");
  CHECK(k == web_key_for("token-one"));
  CHECK(k != web_key_for("token-two"));
  CHECK(k.size() == 32);
  CHECK(k.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(k.find("token-one") == std::string::npos);
}
