// The I/O loop's links to its peers once made (io_loop.h): what their monitors say, what a lost
// or refused link fails, and links closed when idle; and the connections its listeners accept.
#include "io_loop.h"

#include <sys/socket.h>

#include <cstring>

namespace yard::detail {

void IoLoop::on_monitor_readable(const std::string& addr, Peer& p) {
  for (;;) {
    zmq::message_t ev, ep;
    if (!p.monitor->recv(ev, zmq::recv_flags::dontwait)) return;
    if (ev.more()) (void)p.monitor->recv(ep, zmq::recv_flags::none);
    uint16_t event = 0;
    if (ev.size() >= 2) std::memcpy(&event, ev.data(), 2);
    if (event == ZMQ_EVENT_CONNECTED) {
      p.connected = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      p.handshaken = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
               event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || (event == ZMQ_EVENT_DISCONNECTED && p.curve && !p.handshaken)) {
      fail_peer(addr,
                "the encrypted link to " + addr + " was refused: its key is not this process's (is the cluster "
                "token right?)",
                wire::ErrorCode::UNAUTHENTICATED);
      return;
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      fail_peer(addr, "connection to " + addr + " was lost");
      return;
    } else if (event == ZMQ_EVENT_CONNECT_RETRIED && !p.connected) {
      fail_peer(addr, "cannot connect to " + addr + ": connection refused", wire::ErrorCode::UNAVAILABLE);
      return;
    }
  }
}

void IoLoop::fail_peer(const std::string& addr, const std::string& why, wire::ErrorCode code) {
  std::vector<ReplyCallback> cbs;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.peer == addr) {
      cbs.push_back(std::move(it->second.cb));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  auto it = peers_.find(addr);
  if (it != peers_.end()) {
    zmq_socket_monitor(it->second.dealer->handle(), nullptr, 0);
    peers_.erase(it);
  }
  sealed_links_.erase(addr);
  active_.erase(addr);
  for (auto& cb : cbs) fail(cb, LocalError{code, why});
}

void IoLoop::settle(const std::string& addr) {
  auto it = peers_.find(addr);
  if (it != peers_.end() && it->second.inflight > 0 && --it->second.inflight == 0) active_.erase(addr);
}

void IoLoop::close_idle(Clock::time_point now) {
  if (now < next_idle_sweep_) return;
  next_idle_sweep_ = now + std::chrono::seconds(5);
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto& p = it->second;
    if (p.inflight == 0 && p.outbox.empty() && now - p.last_used > kIdleLink) {
      zmq_socket_monitor(p.dealer->handle(), nullptr, 0);
      sealed_links_.erase(it->first);
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

void IoLoop::on_router_monitor_readable(zmq::socket_t& monitor) {
  for (;;) {
    zmq::message_t ev, ep;
    if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return;
    if (ev.more()) (void)monitor.recv(ep, zmq::recv_flags::none);
    uint16_t event = 0;
    uint32_t value = 0;
    if (ev.size() >= 6) {
      std::memcpy(&event, ev.data(), 2);
      std::memcpy(&value, static_cast<const char*>(ev.data()) + 2, 4);
    }
    int fd = static_cast<int>(value);
    if (event == ZMQ_EVENT_ACCEPTED) {
      std::string peer = socket_peer(fd);
      if (auto why = connections_.accept(fd, peer)) {
        // Shutting the socket down makes ZeroMQ see it closed and drop the connection itself.
        ::shutdown(fd, SHUT_RDWR);
        fault(peer, "refused a connection to " + address_ + ": " + *why);
      }
      continue;
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      connections_.closed(fd);
      continue;
    }
    // A client with another key fails before the ZAP handler hears of it, and the event names
    // only the listening end: the peer's address is unknown here.
    fault("a peer", "refused a connection to " + address_ + ": the encrypted handshake failed (a key that is not the "
                    "cluster's: a wrong cluster token, or a client that does not encrypt)");
  }
}

}  // namespace yard::detail
