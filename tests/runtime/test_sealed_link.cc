// Sealed data links (sealed_link.h): what a seal accepts and refuses, and an I/O loop's data link
// answering sealed requests for object parts only, while junk and wrongly sealed messages are
// dropped unanswered and counted. Across hosts the data link is tested in netns_test.sh.
#include <catch2/catch.hpp>

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "io_loop.h"
#include "objects/object_fetch.h"
#include "messenger.h"
#include "sealed_link.h"

using namespace yard::detail;
namespace wire = yard::wire;
using namespace std::chrono_literals;

namespace {

Frames frames_of(std::initializer_list<std::string> parts) {
  Frames f;
  for (auto& p : parts) f.emplace_back(p.data(), p.size());
  return f;
}
std::string text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

// An IPv4 address of this machine other than loopback ("" when it has none).
std::string outside_address() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (auto* a = all; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP))
      continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
  }
  freeifaddrs(all);
  return found;
}

template <class F>
bool wait_until(F f, std::chrono::milliseconds limit = 5000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

TEST_CASE("a sealed message opens with its key and direction, in place, and hides its bytes", "[security][sealed]") {
  auto key = LinkSeal::make_key();
  REQUIRE(key.size() == LinkSeal::kKeyBytes);
  CHECK(LinkSeal::make_key() != key);
  LinkSeal a(key), b(key);
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char('a' + i % 26);
  auto f = frames_of({"envelope", "", big});
  a.seal(f, SealedAs::request);
  REQUIRE(f.size() == 3);
  CHECK(f[0].size() == 8 + LinkSeal::kHeaderBytes + LinkSeal::kTagBytes);
  CHECK(text(f[2]).find("abcdefghijklmnop") == std::string::npos);
  REQUIRE(b.open(f, SealedAs::request));
  CHECK(text(f[0]) == "envelope");
  CHECK(f[1].size() == 0);
  CHECK(text(f[2]) == big);
  CHECK_THROWS_AS(LinkSeal(std::string(16, 'k')), std::invalid_argument);
}

TEST_CASE("a sealed message altered, cut, mixed with another, reflected or under another key does not open",
          "[security][sealed]") {
  auto key = LinkSeal::make_key();
  LinkSeal seal(key);
  auto sealed = [&](std::initializer_list<std::string> parts, SealedAs as = SealedAs::request) {
    auto f = frames_of(parts);
    seal.seal(f, as);
    return f;
  };
  auto opens = [&](Frames f, SealedAs as = SealedAs::request) { return LinkSeal(key).open(f, as); };
  CHECK(opens(sealed({"one", "two"})));
  // Any byte changed: the header, the ciphertext, the tag.
  for (size_t at : {size_t(0), size_t(13), size_t(LinkSeal::kHeaderBytes), size_t(LinkSeal::kHeaderBytes + 3)}) {
    auto f = sealed({"a value of some length"});
    static_cast<char*>(f[0].data())[at] ^= 1;
    CHECK_FALSE(opens(std::move(f)));
  }
  // A frame dropped, or the frames reordered.
  auto cut = sealed({"one", "two"});
  cut.pop_back();
  CHECK_FALSE(opens(std::move(cut)));
  auto swapped = sealed({"one", "two"});
  std::swap(swapped[0], swapped[1]);
  CHECK_FALSE(opens(std::move(swapped)));
  // A frame of another message in its place.
  auto x = sealed({"one", "two"}), y = sealed({"three", "four"});
  x[1] = std::move(y[1]);
  CHECK_FALSE(opens(std::move(x)));
  // A request sent back as a reply.
  CHECK_FALSE(opens(sealed({"ping"}, SealedAs::request), SealedAs::reply));
  // Another key, junk, nothing.
  auto other = frames_of({"one"});
  LinkSeal(LinkSeal::make_key()).seal(other, SealedAs::request);
  CHECK_FALSE(opens(std::move(other)));
  CHECK_FALSE(opens(frames_of({"not sealed at all, but long enough to be"})));
  CHECK_FALSE(opens(Frames{}));
}

TEST_CASE("a data link answers sealed object-part requests only; junk and other keys are dropped unanswered",
          "[security][sealed]") {
  std::string host = outside_address();
  if (host.empty()) {
    WARN("skipped: this machine has no address other than loopback to listen on");
    return;
  }
  IoLoop* holder_ptr = nullptr;
  IoLoop holder(host, 0, "tok", [&](IoLoop::Incoming in) {
    OutMessage m("tok", in.msg->env().getRequestId(), true);
    auto part = m.env().getBody().initObjectPart();
    part.setTotal(via_data_link(in.routing_id) ? 1 : 0);  // says which link it came in on
    holder_ptr->reply(in.routing_id, m.finish());
  });
  holder_ptr = &holder;
  REQUIRE(holder.data_link());
  CHECK(holder.data_link()->address != holder.address());
  IoLoop asker("127.0.0.1", 0, "tok", [](IoLoop::Incoming) {});
  CHECK_FALSE(asker.data_link());  // loopback: none

  auto ask = [&](const std::string& to, bool part) {
    uint64_t id = asker.next_request_id();
    OutMessage m("tok", id, false);
    if (part) m.env().getBody().initGetObjectPart().setId("o");
    else m.env().getBody().setPing();
    auto got = std::make_shared<std::promise<std::string>>();
    asker.request(to, id, m.finish(), [got](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
      if (e) got->set_value("local: " + e->message);
      else if (r->env().getBody().isError()) got->set_value("error: " + std::string(r->env().getBody().getError().getMessage()));
      else got->set_value("part via data link: " + std::to_string(r->env().getBody().getObjectPart().getTotal()));
    }, 5000ms);
    return got->get_future().get();
  };
  std::promise<std::string> named;
  asker.post([&] { named.set_value(asker.sealed_peer(*holder.data_link())); });
  std::string sealed = named.get_future().get();
  CHECK(ask(holder.address(), true) == "part via data link: 0");
  CHECK(ask(sealed, true) == "part via data link: 1");
  CHECK_THAT(ask(sealed, false), Catch::Contains("only requests for parts of objects"));

  // A raw client: plain frames, and frames sealed under another key, get nothing back.
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect("tcp://" + holder.data_link()->address);
  uint64_t before = holder.malformed_count();
  OutMessage plain("tok", 99, false);
  plain.env().getBody().initGetObjectPart().setId("o");
  auto frames = plain.finish();
  raw.send(frames[0], zmq::send_flags::none);
  auto forged = frames_of({"a request sealed under a guessed key, long enough"});
  LinkSeal(LinkSeal::make_key()).seal(forged, SealedAs::request);
  raw.send(forged[0], zmq::send_flags::none);
  REQUIRE(wait_until([&] { return holder.malformed_count() >= before + 2; }));
  // A good request after them is still answered, and nothing came back to the raw client.
  CHECK(ask(sealed, true) == "part via data link: 1");
  zmq::message_t nothing;
  CHECK_FALSE(raw.recv(nothing, zmq::recv_flags::dontwait));
}

TEST_CASE("a value in parts comes over the holder's data link, or over the encrypted link when that cannot be reached",
          "[security][sealed]") {
  std::string host = outside_address();
  if (host.empty()) {
    WARN("skipped: this machine has no address other than loopback to listen on");
    return;
  }
  std::string pattern(10 * (1 << 20) + 12345, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = char((i * 131 + i / 4096) & 0xFF);
  Bytes value = std::make_shared<StringBuffer>(pattern);
  std::atomic<int> by_link{0}, by_data{0};
  std::optional<IoLoop::DataLink> offer;  // what the holder names as its data link
  IoLoop* holder_ptr = nullptr;
  IoLoop holder(host, 0, "tok", [&](IoLoop::Incoming in) {
    bool data = via_data_link(in.routing_id);
    ++(data ? by_data : by_link);
    OutMessage m("tok", in.msg->env().getRequestId(), true);
    answer_object_part(m, in.msg->env().getBody().getGetObjectPart(), value, data || !offer ? nullptr : &*offer);
    holder_ptr->reply(in.routing_id, m.finish());
  });
  holder_ptr = &holder;
  Channel asker;
  asker.open(std::make_unique<IoLoop>("127.0.0.1", 0, "tok", [](IoLoop::Incoming) {}));
  auto fetch = [&] {
    std::promise<FetchResult> done;
    asker.post([&] { fetch_object(asker, "tok", "o", holder.address(), [&](FetchResult r) { done.set_value(std::move(r)); }); });
    auto r = done.get_future().get();
    return r.value && std::string(r.value->data(), r.value->size()) == pattern;
  };
  SECTION("over the data link") {
    offer = holder.data_link();
    CHECK(fetch());
    CHECK(by_link == 1);  // the first part alone
    CHECK(by_data >= 3);
  }
  SECTION("a data link that cannot be reached: over the encrypted link") {
    // A port nothing listens on (bound, then closed).
    zmq::context_t ctx;
    std::string closed;
    {
      zmq::socket_t s(ctx, zmq::socket_type::router);
      s.bind("tcp://" + host + ":*");
      std::string ep = s.get(zmq::sockopt::last_endpoint);
      closed = host + ":" + ep.substr(ep.rfind(':') + 1);
    }
    offer = IoLoop::DataLink{closed, holder.data_link()->key};
    CHECK(fetch());
    CHECK(by_data == 0);
    CHECK(by_link >= 3);
  }
}

TEST_CASE("a peer that names itself with the data link's routing prefix is not read", "[security][sealed]") {
  IoLoop* loop_ptr = nullptr;
  IoLoop loop("127.0.0.1", 0, "tok", [&](IoLoop::Incoming in) {
    OutMessage m("tok", in.msg->env().getRequestId(), true);
    m.env().getBody().setOk();
    loop_ptr->reply(in.routing_id, m.finish());
  });
  loop_ptr = &loop;
  zmq::context_t ctx;
  auto client = [&](const std::string& identity) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    if (!identity.empty()) s->set(zmq::sockopt::routing_id, identity);
    s->connect("tcp://" + loop.address());
    OutMessage req("tok", 5, false);
    req.env().getBody().setPing();
    auto frames = req.finish();
    s->send(frames[0], zmq::send_flags::none);
    return s;
  };
  auto answered = [](zmq::socket_t& s, int ms) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, std::chrono::milliseconds(ms)) > 0;
  };
  auto plain = client("");
  CHECK(answered(*plain, 5000));
  uint64_t before = loop.malformed_count();
  auto posing = client("dpose");
  REQUIRE(wait_until([&] { return loop.malformed_count() > before; }));
  CHECK_FALSE(answered(*posing, 0));
  auto after = client("");
  CHECK(answered(*after, 5000));  // and the loop still answers others
}
