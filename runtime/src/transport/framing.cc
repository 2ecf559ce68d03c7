#include "framing.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "link_limits.h"

namespace yard::detail {

std::shared_ptr<zmq::context_t> make_io_context(int io_threads) {
  auto ctx = std::make_shared<zmq::context_t>(io_threads);
  // ZeroMQ's default of 1,024 sockets per context would cap a process of many loops (simulated
  // nodes, several sockets each) at a few hundred: allow as many as it may open descriptors.
  rlimit fds{};
  if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur > 1024)
    ctx->set(zmq::ctxopt::max_sockets, static_cast<int>(std::min<rlim_t>(fds.rlim_cur, 1 << 20)));
  return ctx;
}

void tune(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(link_limits().max_message_bytes));
}

std::string bound_address(zmq::socket_t& s, const std::string& host) {
  std::string last = s.get(zmq::sockopt::last_endpoint);  // tcp://127.0.0.1:12345
  return host + ":" + last.substr(last.rfind(':') + 1);
}

std::string frame_peer_address(zmq::message_t& m) {
  const char* a = zmq_msg_gets(m.handle(), "Peer-Address");
  return a ? a : "unknown";
}

bool receive_routed(zmq::socket_t& router, zmq::message_t& rid, Frames& frames) {
  if (!router.recv(rid, zmq::recv_flags::dontwait)) return false;
  bool more = rid.more();
  while (more) {
    zmq::message_t m;
    (void)router.recv(m, zmq::recv_flags::none);
    more = m.more();
    frames.push_back(std::move(m));
  }
  return true;
}

size_t batch_cap() {
  static const size_t cap = std::min(kBatchMaxBytes, static_cast<size_t>(link_limits().max_message_bytes));
  return cap;
}

void send_batched(zmq::socket_t& s, const std::string* routing, std::vector<Frames>& msgs, LinkSeal* seal,
                  SealedAs as) {
  size_t cap = batch_cap();
  // (A batch written by a BatchWriter goes as it is.)
  auto batchable = [&](const Frames& f) {
    return f.size() == 1 && f[0].size() % 8 == 0 && f[0].size() + 16 <= cap && !is_batch(f[0]);
  };
  auto send = [&](Frames& fr) {
    if (seal) seal->seal(fr, as);
    if (routing) s.send(zmq::buffer(*routing), zmq::send_flags::sndmore);
    for (size_t k = 0; k < fr.size(); ++k)
      s.send(fr[k], k + 1 < fr.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  for (size_t i = 0; i < msgs.size();) {
    size_t j = i, bytes = 8;
    while (j < msgs.size() && batchable(msgs[j]) && bytes + 8 + msgs[j][0].size() <= cap) bytes += 8 + msgs[j++][0].size();
    if (j - i <= 1) {  // alone: not batchable, or nothing to batch it with
      send(msgs[i++]);
      continue;
    }
    Frames batch;
    batch.push_back(pack_batch(msgs, i, j));
    send(batch);
    i = j;
  }
  msgs.clear();
}

size_t largest_frame(const Frames& frames) {
  size_t largest = 0;
  for (auto& f : frames) largest = std::max(largest, f.size());
  return largest;
}

std::optional<std::string> oversized(size_t frame_bytes, const std::string& to) {
  auto limit = static_cast<size_t>(link_limits().max_message_bytes);
  if (frame_bytes <= limit) return std::nullopt;
  return "a message of " + std::to_string(frame_bytes) + " bytes to " + to + " is over the limit of " +
         std::to_string(limit) + " bytes (YARD_MAX_MESSAGE_BYTES); pass a value that large with yard::put";
}

Frames within_limit(Frames frames, const std::string& token) {
  auto too_big = oversized(largest_frame(frames), "a requester");
  if (!too_big) return frames;
  spdlog::error("{}", *too_big);
  uint64_t request_id = 0;
  try {
    Frames head;
    head.emplace_back(frames.front().data(), frames.front().size());
    request_id = InMessage(std::move(head)).env().getRequestId();
  } catch (const std::exception&) {
  }
  OutMessage out(token, request_id, true);
  set_error(out.env(), wire::ErrorCode::BAD_REQUEST, *too_big);
  return out.finish();
}

std::optional<MonitorEvent> next_monitor_event(zmq::socket_t& monitor) {
  zmq::message_t ev, ep;
  if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return std::nullopt;
  if (ev.more()) (void)monitor.recv(ep, zmq::recv_flags::none);
  MonitorEvent e{0, 0, ep.to_string()};
  if (ev.size() >= 2) std::memcpy(&e.event, ev.data(), 2);
  if (ev.size() >= 6) std::memcpy(&e.value, static_cast<const char*>(ev.data()) + 2, 4);
  return e;
}

std::unique_ptr<zmq::socket_t> monitor_of(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint,
                                          int events) {
  if (zmq_socket_monitor(s.handle(), endpoint.c_str(), events) != 0) throw zmq::error_t();
  auto monitor = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  monitor->connect(endpoint);
  return monitor;
}

// A ZeroMQ socket's descriptor (ZMQ_FD) becomes readable when commands reach the socket, and
// asking ZMQ_EVENTS takes them, so events already there are found by asking each socket first,
// and only when none has any does the loop block on the descriptors; then only the sockets whose
// descriptor woke are asked again (zmq_poll polls once more without waiting first, and asks every
// socket after each poll: each ask is a poll and a getpid of its own inside libzmq). A plain
// descriptor (the wake fd) found ready while a socket already was is taken on the next turn
// (posted work is drained every turn regardless).
bool Poller::wait(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
  auto ready = [](zmq::pollitem_t& it) {
    uint32_t events = 0;
    size_t size = sizeof events;
    if (zmq_getsockopt(it.socket, ZMQ_EVENTS, &events, &size) != 0) throw zmq::error_t();
    it.revents = static_cast<short>(events & static_cast<uint32_t>(it.events));
    return it.revents != 0;
  };
  bool any = false;
  for (auto& it : items) {
    it.revents = 0;
    if (it.socket) any = ready(it) || any;
  }
  if (any) return true;
  fds_.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    fds_[i] = {items[i].fd, POLLIN, 0};
    if (items[i].socket) {
      size_t size = sizeof fds_[i].fd;
      if (zmq_getsockopt(items[i].socket, ZMQ_FD, &fds_[i].fd, &size) != 0) throw zmq::error_t();
    }
  }
  int rc = ::poll(fds_.data(), fds_.size(), timeout.count() > std::numeric_limits<int>::max()
                                                ? -1 : static_cast<int>(timeout.count()));
  if (rc < 0) {
    if (errno == EINTR) return false;
    throw zmq::error_t();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (!(fds_[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
    if (items[i].socket)
      ready(items[i]);
    else
      items[i].revents = ZMQ_POLLIN;
  }
  return true;
}

}  // namespace yard::detail
