// Limits on what one peer can make the head hold: thousands of connections from one address, and
// a message over the size limit. Each is refused with the peer's address in the head's log, at a
// bounded rate; the head keeps its memory and serves other clients meanwhile.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <zmq.hpp>

#include "cli_support.h"
#include "yard/internal/session.h"
#include "wire.h"

using namespace yard::cli_test;

namespace {

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A TCP connection to 127.0.0.1:port from the source address `from` (any of 127/8); -1 if refused.
int connect_from(const char* from, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the other end has closed fd (a read sees the end).
bool closed_by_peer(int fd) {
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

size_t count_lines(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += line.find(what) != std::string::npos;
  return n;
}

// A ping answered by the head at addr, sent from the source address `from` (default: any).
bool ping(zmq::context_t& ctx, const std::string& addr, const std::string& token, const std::string& from = "") {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect("tcp://" + (from.empty() ? "" : from + ":0;") + addr);
  yard::detail::OutMessage m(token, 1, false);
  m.env().getBody().setPing();
  auto f = m.finish();
  s.send(f[0], zmq::send_flags::none);
  auto in = yard::test::recv_reply(s);
  return in && in->env().getBody().isOk();
}

}  // namespace

TEST_CASE("a connection flood and an oversized message from one peer leave the head serving others", "[cli][limits]") {
  setenv("YARD_MAX_CONNECTIONS_PER_PEER", "200", 1);
  setenv("YARD_MAX_MESSAGE_BYTES", "1048576", 1);
  Cluster c;
  unsetenv("YARD_MAX_CONNECTIONS_PER_PEER");
  unsetenv("YARD_MAX_MESSAGE_BYTES");
  auto rec = yard::detail::latest_record();
  REQUIRE(rec);
  auto tok = yard::detail::read_token(rec->token_file);
  std::string head_log = rec->log_dir + "/head.log";
  zmq::context_t ctx;
  REQUIRE(ping(ctx, c.addr, tok));
  long rss_before = rss_kib(c.pid);

  // 2,000 connections from 127.0.0.2, held open: all past the 200th are shut by the head.
  std::vector<int> flood;
  for (int i = 0; i < 2000; ++i)
    if (int fd = connect_from("127.0.0.2", c.port); fd >= 0) flood.push_back(fd);
  struct CloseAll {
    std::vector<int>& fds;
    ~CloseAll() {
      for (int fd : fds) close(fd);
    }
  } close_all{flood};
  REQUIRE(flood.size() == 2000);
  auto shut = [&] {
    size_t n = 0;
    for (int fd : flood) n += closed_by_peer(fd);
    return n;
  };
  CHECK(eventually([&] { return shut() == 1800; }, 20s));
  // Meanwhile clients from another address are served.
  CHECK(ping(ctx, c.addr, tok));
  CHECK(sh(c.yard("status")).code == 0);
  long rss_flooded = rss_kib(c.pid);
  INFO("head RSS " << rss_before << " KiB before, " << rss_flooded << " KiB with 2,000 connections");
  CHECK(rss_flooded - rss_before < 32 * 1024);
  // Reported with the address, at a bounded rate: not one line per connection.
  CHECK(eventually([&] { return count_lines(head_log, "127.0.0.2 already has 200 open connections") >= 1; }, 10s));
  CHECK(count_lines(head_log, "127.0.0.2") <= 3);

  // A frame over the limit: the head drops that connection without allocating it, and serves on.
  {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 1000);
    s.connect("tcp://" + c.addr);
    yard::detail::OutMessage m(tok, 2, false);
    m.env().getBody().setPing();
    auto f = m.finish();
    std::string big(2 << 20, 'x');
    s.send(f[0], zmq::send_flags::sndmore);
    s.send(zmq::buffer(big), zmq::send_flags::none);
    zmq::message_t reply;
    CHECK_FALSE(s.recv(reply));  // never delivered, never answered
  }
  CHECK(ping(ctx, c.addr, tok));
  CHECK(rss_kib(c.pid) - rss_before < 32 * 1024);

  // Once the flood ends its connections are forgotten: the same address is admitted again.
  for (int fd : flood) close(fd);
  flood.clear();
  CHECK(eventually([&] { return ping(ctx, c.addr, tok, "127.0.0.2"); }, 10s));
}
