// How the I/O loop makes its links to peers (io_loop.h): most on the ROUTER their kind shares,
// lanes and sealed data links on sockets of their own; and what the shared ROUTERs receive and
// their monitors say.
//
// A shared ROUTER connects to each peer under a routing id of its own (ZMQ_CONNECT_ROUTING_ID),
// so a request is sent to a peer by naming it, and a reply names the link it came over. Its
// monitor names a connection being made by the endpoint it was asked for, and a connection once
// made by its descriptor, so each event reaches one link. It never reconnects by itself
// (ZMQ_RECONNECT_IVL -1): a refused or lost connection fails its link's requests, as a link of
// its own does, and the next request makes a new link under a new routing id (ZeroMQ refuses a
// routing id still held by a link being closed).
#include <cstring>

#include "io_loop.h"

namespace yard::detail {

namespace {
constexpr int kOwnLinkEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
// Without reconnection a refused connection ends in CLOSED (no CONNECT_RETRIED).
constexpr int kSharedLinkEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
                                  ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

bool handshake_failed(uint16_t event) {
  return event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
         event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

std::string refused_key(const std::string& addr) {
  return "the encrypted link to " + addr + " was refused: its key is not this process's (is the cluster token right?)";
}
}  // namespace

IoLoop::Peer& IoLoop::peer(const std::string& addr) {
  auto it = peers_.find(addr);
  if (it != peers_.end()) return it->second;
  // Links and accepted connections share the descriptors: a loop many peers connect to keeps
  // fewer links of its own.
  if (peers_.size() + connections_.total() >= max_links_.load(std::memory_order_relaxed)) close_least_used();
  Peer p;
  std::string target = addr.substr(0, addr.find('/'));  // "host:port/lane": a connection of its own
  if (sealed_links_.count(addr) || target.size() != addr.size()) {
    link_own(addr, p, std::move(target));
  } else {
    p.curve = curve_for_host(host_of(target));
    link_shared(addr, p, target);
  }
  return peers_.emplace(addr, std::move(p)).first->second;
}

void IoLoop::link_own(const std::string& addr, Peer& p, std::string target) {
  p.dealer = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::dealer);
  tune(*p.dealer);
  if (auto sealed = sealed_links_.find(addr); sealed != sealed_links_.end()) {
    // A data link (sealed_peer): plain ZeroMQ, every message sealed. It answers only requests for
    // parts, so ZMTP heartbeats notice a vanished peer here instead of probe_silent's PINGs (a
    // data link is made only for large transfers: a few per process).
    p.dealer->set(zmq::sockopt::heartbeat_ivl, 1000);
    p.dealer->set(zmq::sockopt::heartbeat_timeout, 4000);
    p.seal = std::make_unique<LinkSeal>(sealed->second.key);
    target = sealed->second.address;
  } else if (curve_for_host(host_of(target))) {
    p.curve = true;
    p.dealer->set(zmq::sockopt::curve_serverkey, keys().public_z85);
    p.dealer->set(zmq::sockopt::curve_publickey, keys().public_z85);
    p.dealer->set(zmq::sockopt::curve_secretkey, keys().secret_z85);
  }
  std::string mon = inproc_ + "-monitor-" + std::to_string(++monitor_seq_);
  if (zmq_socket_monitor(p.dealer->handle(), mon.c_str(), kOwnLinkEvents) != 0) throw zmq::error_t();
  p.monitor = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pair);
  p.monitor->set(zmq::sockopt::linger, 0);
  p.monitor->connect(mon);
  p.dealer->connect("tcp://" + target);
}

void IoLoop::link_shared(const std::string& addr, Peer& p, const std::string& target) {
  auto& s = shared_for(p);
  if (!s.router) {
    auto router = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
    tune(*router);
    router->set(zmq::sockopt::reconnect_ivl, -1);
    router->set(zmq::sockopt::router_mandatory, 0);
    if (p.curve) {  // every peer's key is the cluster's: one set of client keys serves all links
      router->set(zmq::sockopt::curve_serverkey, keys().public_z85);
      router->set(zmq::sockopt::curve_publickey, keys().public_z85);
      router->set(zmq::sockopt::curve_secretkey, keys().secret_z85);
    }
    std::string mon = inproc_ + (p.curve ? "-links-curve" : "-links");
    if (zmq_socket_monitor(router->handle(), mon.c_str(), kSharedLinkEvents) != 0) throw zmq::error_t();
    s.monitor = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pair);
    s.monitor->set(zmq::sockopt::linger, 0);
    s.monitor->connect(mon);
    s.router = std::move(router);
  }
  p.rid = "l" + std::to_string(++link_seq_);
  p.endpoint = "tcp://" + target;
  s.router->set(zmq::sockopt::connect_routing_id, p.rid);
  s.router->connect(p.endpoint);
  s.by_rid[p.rid] = addr;
  s.by_endpoint[p.endpoint] = addr;
}

void IoLoop::unlink(const std::string& addr, Peer& p) {
  if (p.dealer) {
    zmq_socket_monitor(p.dealer->handle(), nullptr, 0);
    return;
  }
  auto& s = shared_for(p);
  zmq_disconnect(s.router->handle(), p.endpoint.c_str());
  s.by_rid.erase(p.rid);
  if (auto it = s.by_endpoint.find(p.endpoint); it != s.by_endpoint.end() && it->second == addr) s.by_endpoint.erase(it);
  if (auto it = s.by_fd.find(p.fd); it != s.by_fd.end() && it->second == addr) s.by_fd.erase(it);
}

void IoLoop::on_shared_readable(SharedLinks& s) {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*s.router, rid, frames)) return;
    auto link = s.by_rid.find(std::string(static_cast<const char*>(rid.data()), rid.size()));
    if (link == s.by_rid.end()) continue;  // a closed link's late message
    std::string addr = link->second;
    peers_.at(addr).heard = Clock::now();
    take_replies(addr, std::move(frames));
  }
}

void IoLoop::on_shared_monitor(SharedLinks& s, bool idle_only) {
  if (!idle_only) {  // what an earlier reading held back comes first, in order
    auto held = std::move(held_events_);
    held_events_.clear();
    for (auto& [from, e] : held) {
      if (from == &s)
        apply_link_event(s, e);
      else
        held_events_.emplace_back(from, std::move(e));
    }
  }
  for (;;) {
    zmq::message_t ev, ep;
    if (!s.monitor->recv(ev, zmq::recv_flags::dontwait)) return;
    if (ev.more()) (void)s.monitor->recv(ep, zmq::recv_flags::none);
    LinkEvent e{0, 0, ep.to_string()};
    if (ev.size() >= 6) {
      std::memcpy(&e.event, ev.data(), 2);
      std::memcpy(&e.value, static_cast<const char*>(ev.data()) + 2, 4);
    }
    if (idle_only) {
      // A busy link's event waits: failing it now would call its requests' callbacks from inside
      // the request being made.
      auto known = link_of(s, e);
      if (known != peers_.end() && known->second.inflight > 0) {
        held_events_.emplace_back(&s, std::move(e));
        continue;
      }
    }
    apply_link_event(s, e);
  }
}

IoLoop::PeerMap::iterator IoLoop::link_of(SharedLinks& s, const LinkEvent& e) {
  if (e.event == ZMQ_EVENT_DISCONNECTED) {
    auto it = s.by_fd.find(static_cast<int>(e.value));
    return it == s.by_fd.end() ? peers_.end() : peers_.find(it->second);
  }
  auto it = s.by_endpoint.find(e.endpoint);
  return it == s.by_endpoint.end() ? peers_.end() : peers_.find(it->second);
}

void IoLoop::apply_link_event(SharedLinks& s, const LinkEvent& e) {
  auto pit = link_of(s, e);
  if (pit == peers_.end()) return;  // a closed link's
  auto& p = pit->second;
  if (e.event == ZMQ_EVENT_CONNECTED) {  // its later events name it by this descriptor
    if (p.fd >= 0) s.by_fd.erase(p.fd);
    p.fd = static_cast<int>(e.value);
    s.by_fd[p.fd] = pit->first;
  }
  std::string name = pit->first;  // fail_peer erases the peer
  on_link_event(name, p, e.event, ZMQ_EVENT_CLOSED);
}

bool IoLoop::on_link_event(const std::string& addr, Peer& p, uint16_t event, uint16_t refusal) {
  if (event == ZMQ_EVENT_CONNECTED) {
    p.connected = true;
  } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    p.handshaken = true;
  } else if (handshake_failed(event) || (event == ZMQ_EVENT_DISCONNECTED && p.curve && !p.handshaken)) {
    fail_peer(addr, refused_key(addr), wire::ErrorCode::UNAUTHENTICATED);
    return true;
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    fail_peer(addr, "connection to " + addr + " was lost");
    return true;
  } else if (event == refusal && !p.connected) {
    fail_peer(addr, "cannot connect to " + addr + ": connection refused", wire::ErrorCode::UNAVAILABLE);
    return true;
  }
  return false;
}

void IoLoop::on_monitor_readable(const std::string& addr, Peer& p) {
  for (;;) {
    zmq::message_t ev, ep;
    if (!p.monitor->recv(ev, zmq::recv_flags::dontwait)) return;
    if (ev.more()) (void)p.monitor->recv(ep, zmq::recv_flags::none);
    uint16_t event = 0;
    if (ev.size() >= 2) std::memcpy(&event, ev.data(), 2);
    if (on_link_event(addr, p, event, ZMQ_EVENT_CONNECT_RETRIED)) return;  // with reconnection, a refusal retries
  }
}

}  // namespace yard::detail
