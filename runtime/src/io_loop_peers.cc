// The I/O loop's links to its peers once made (io_loop.h): what a lost or refused link fails,
// links closed when idle, silent peers probed; and the connections its listeners accept.
#include "io_loop.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <future>

namespace yard::detail {

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
    unlink(addr, it->second);
    if (last_peer_ == &it->second) last_peer_ = nullptr;
    peers_.erase(it);
  }
  sealed_links_.erase(addr);
  active_.erase(addr);
  for (auto& cb : cbs) fail(cb, LocalError{code, why});
}

void IoLoop::settle(const Pending& p) {
  if (p.link->inflight > 0 && --p.link->inflight == 0) {
    active_.erase(p.peer);
    p.link->last_used = Clock::now();  // idle from now
  }
}

void IoLoop::close_idle(Clock::time_point now) {
  if (now < next_idle_sweep_) return;
  next_idle_sweep_ = now + idle_sweep();
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto& p = it->second;
    if (p.inflight == 0 && !p.queued() && now - p.last_used > std::chrono::milliseconds(idle_link_ms_.load())) {
      it = close_link(it);
    } else {
      ++it;
    }
  }
}

void IoLoop::close_least_used() {
  std::vector<std::pair<Clock::time_point, std::string>> idle;
  for (auto& [addr, p] : peers_)
    if (p.inflight == 0 && !p.queued()) idle.emplace_back(p.last_used, addr);
  size_t n = std::min(idle.size(), std::max<size_t>(1, peers_.size() / 4));
  std::nth_element(idle.begin(), idle.begin() + static_cast<long>(n), idle.end());
  for (size_t i = 0; i < n; ++i) close_link(peers_.find(idle[i].second));
}

size_t IoLoop::link_count() {
  if (in_loop()) return peers_.size();
  auto n = std::make_shared<std::promise<size_t>>();
  auto fut = n->get_future();
  post([this, n] { n->set_value(peers_.size()); });
  return fut.get();
}

IoLoop::PeerMap::iterator IoLoop::close_link(PeerMap::iterator it) {
  unlink(it->first, it->second);
  sealed_links_.erase(it->first);
  if (last_peer_ == &it->second) last_peer_ = nullptr;
  return peers_.erase(it);
}

void IoLoop::probe_silent(Clock::time_point now) {
  if (now < next_probe_scan_) return;
  next_probe_scan_ = now + std::chrono::milliseconds(250);
  std::vector<std::string> gone, ask;
  const std::chrono::milliseconds limit(silence_ms_.load(std::memory_order_relaxed));
  for (auto& addr : active_) {
    auto it = peers_.find(addr);
    if (it == peers_.end() || it->second.seal) continue;  // data links keep ZMTP heartbeats
    auto quiet = now - it->second.heard;
    if (quiet >= limit)
      gone.push_back(addr);
    else if (quiet >= std::min<Clock::duration>(std::chrono::seconds(1), limit / 4) && !it->second.probing)
      ask.push_back(addr);
  }
  for (auto& addr : gone)
    fail_peer(addr, addr + " has not answered for " + std::to_string(limit.count()) +
                        " ms, a PING included (its process or host is stopped, or the network to it is cut)");
  for (auto& addr : ask) {
    peers_.at(addr).probing = true;
    uint64_t id = next_request_id();
    OutMessage m(token_, id, false);
    m.env().getBody().setPing();
    enqueue_request(addr, id, m.finish(), [this, addr](std::unique_ptr<InMessage>, std::optional<LocalError>) {
      if (auto it = peers_.find(addr); it != peers_.end()) it->second.probing = false;
    }, std::chrono::milliseconds::max(), {});
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
