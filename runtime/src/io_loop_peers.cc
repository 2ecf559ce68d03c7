// The I/O loop's links to its peers once made (io_loop.h): what their monitors say, what a lost
// or refused link fails, and links closed when idle.
#include "io_loop.h"

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
  sealed_keys_.erase(addr);
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
      sealed_keys_.erase(it->first);
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace yard::detail
