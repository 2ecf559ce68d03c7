// What every socket of the transport shares: its tuning, how a routed message is read, how a
// turn's messages leave in batches, and the message limit a sender checks before sending.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>

#include <zmq.hpp>

#include "sealed_link.h"
#include "wire.h"

namespace yard::detail {

using Clock = std::chrono::steady_clock;

// A ZeroMQ context with `io_threads` I/O threads that may open as many sockets as the process
// may open descriptors. Loops of one process may share one (IoLoop's constructor).
std::shared_ptr<zmq::context_t> make_io_context(int io_threads);
// Limits and buffers of every socket.
void tune(zmq::socket_t& s);
// A bound socket's "host:port".
std::string bound_address(zmq::socket_t& s, const std::string& host);
// The sender's address of a received frame ("unknown" when the transport does not say).
std::string frame_peer_address(zmq::message_t& m);

// One message waiting at a ROUTER: its routing id and frames (false when none waits).
bool receive_routed(zmq::socket_t& router, zmq::message_t& rid, Frames& frames);
// The most a batch holds: kBatchMaxBytes, or the message limit when lower.
size_t batch_cap();
// Sends `msgs` on `s` (to `routing` on a ROUTER), those that fit together as batches (wire.h),
// sealed first when `seal` is given; empties msgs.
void send_batched(zmq::socket_t& s, const std::string* routing, std::vector<Frames>& msgs, LinkSeal* seal = nullptr,
                  SealedAs as = SealedAs::request);

size_t largest_frame(const Frames& frames);
// A message whose largest frame has `frame_bytes` is over the message limit: the error to report
// (nullopt when within).
std::optional<std::string> oversized(size_t frame_bytes, const std::string& to);
// A reply as it may leave: one over the message limit (link_limits.h) becomes an error reply
// that says why, so the requester hears it instead of losing its connection to the limit.
Frames within_limit(Frames reply, const std::string& token);

// Routing ids of requests that came in over a loop's data link begin with this byte (ZeroMQ's
// own begin with a zero byte): their replies go back there, sealed.
constexpr char kDataRouting = 'd';
inline bool via_data_link(const std::string& routing_id) {
  return !routing_id.empty() && routing_id[0] == kDataRouting;
}

// One event read from a socket monitor: what happened, its value (a descriptor), the endpoint.
struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
  std::string endpoint;
};
// The next event waiting at a monitor (nullopt when none).
std::optional<MonitorEvent> next_monitor_event(zmq::socket_t& monitor);
// A PAIR socket that hears `s`'s monitor, published at `endpoint` for `events`.
std::unique_ptr<zmq::socket_t> monitor_of(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint,
                                          int events);

// What zmq_poll does, with fewer system calls (framing.cc says how). Keeps its descriptors
// between turns.
class Poller {
 public:
  // Waits for any of `items` (sockets or descriptors, POLLIN) at most `timeout`: their revents
  // set, false when a signal interrupted the wait.
  bool wait(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout);

 private:
  std::vector<struct pollfd> fds_;
};

}  // namespace yard::detail
