// Limits on what peers can make a listening process hold: the size of one message, and the
// connections one peer address may keep open.
//
// A message (any one frame) over the limit is refused by ZeroMQ before it is allocated, and the
// connection that sent it is closed; a sender checks its own messages against the same limit
// first and fails the request with a clear error instead. Connections are counted per peer
// address as the listener accepts them (the ROUTER's monitor); one past the limit is shut at once,
// and so is any connection past the process's total, so that a flood from one address cannot
// take the file descriptors the cluster's own processes need.
//   YARD_MAX_MESSAGE_BYTES            largest message (frame) taken or sent, default 1 GiB
//   YARD_MAX_CONNECTIONS_PER_PEER     open connections one address may hold, default 1024
//   YARD_LINK_SILENCE_MS              how long a peer that owes replies may stay silent, PINGs
//                                     unanswered, before its requests fail (default 15,000)
//   YARD_MAX_LINKS                    connections one loop keeps, its outgoing links and those
//                                     its listeners accepted together (default: three quarters
//                                     of the descriptor limit)
//   YARD_IDLE_LINK_S                  how long an outgoing link may go unused before it is closed
//                                     (made again on the next request), default 60
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace yard::detail {

struct LinkLimits {
  int64_t max_message_bytes = int64_t(1) << 30;
  size_t max_connections_per_peer = 1024;
  size_t max_connections = 16384;  // all peers together (a share of the descriptor limit)
  int64_t silence_ms = 15000;      // Links::silent
  int64_t idle_link_s = 60;        // Links::close_idle
  // Connections one loop keeps at most, its links (outgoing) and those its listeners accepted
  // together, each a descriptor: past it, the least recently used idle links are closed before a
  // new one is made. Three quarters of the descriptor limit.
  size_t max_links = 12288;
};

// The limits of this process: the environment's, the total from its descriptor limit.
const LinkLimits& link_limits();

// A daemon's (and a driver's) first step: its limit of open files raised to 262,144 where it may
// raise its hard limit, else its soft limit to the hard one, so that a busy head, node or driver
// (thousands of workers' and peers' connections) is not held to the usual 1,024. Before anything
// asks link_limits().
void raise_descriptor_limit();

// The open connections of one listener, per peer address. Pure bookkeeping: the I/O loop shuts
// what accept() refuses.
class ConnectionCount {
 public:
  explicit ConnectionCount(LinkLimits limits) : limits_(limits) {}
  // A connection accepted on descriptor `fd` from `peer`: nullopt to keep it, else why it is
  // refused (it is then not counted).
  std::optional<std::string> accept(int fd, const std::string& peer);
  // The connection on `fd` is closed (a refused or unknown one is ignored).
  void closed(int fd);
  size_t open(const std::string& peer) const;
  size_t total() const { return by_fd_.size(); }

 private:
  LinkLimits limits_;
  std::unordered_map<int, std::string> by_fd_;
  std::unordered_map<std::string, size_t> by_peer_;
};

// The peer address ("a.b.c.d" or an IPv6 address) of a connected socket; "unknown" if none.
std::string socket_peer(int fd);

}  // namespace yard::detail
