// The sockets of the I/O loop's links (links.h): most on the ROUTER their kind shares, lanes and
// sealed data links on sockets of their own; what they receive and what their monitors say.
//
// A shared ROUTER connects to each peer under a routing id of its own (ZMQ_CONNECT_ROUTING_ID),
// so a request is sent to a peer by naming it, and a reply names the link it came over. Its
// monitor names a connection being made by the endpoint it was asked for, and a connection once
// made by its descriptor, so each event reaches one link. It never reconnects by itself
// (ZMQ_RECONNECT_IVL -1): a refused or lost connection fails its link's requests, as a link of
// its own does, and the next request makes a new link under a new routing id (ZeroMQ refuses a
// routing id still held by a link being closed).
#include "links.h"

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

// Every peer's key is the cluster's: one set of client keys serves all links.
void curve_client(zmq::socket_t& s, const CurveKeys& keys) {
  s.set(zmq::sockopt::curve_serverkey, keys.public_z85);
  s.set(zmq::sockopt::curve_publickey, keys.public_z85);
  s.set(zmq::sockopt::curve_secretkey, keys.secret_z85);
}
}  // namespace

zmq::socket_t& SharedRouter::open(zmq::context_t& ctx, const std::string& monitor_endpoint, const CurveKeys* curve) {
  if (router_) return *router_;
  auto router = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
  tune(*router);
  router->set(zmq::sockopt::reconnect_ivl, -1);
  router->set(zmq::sockopt::router_mandatory, 0);
  if (curve) curve_client(*router, *curve);
  monitor_ = monitor_of(ctx, *router, monitor_endpoint, kSharedLinkEvents);
  router_ = std::move(router);
  return *router_;
}

void SharedRouter::connect(const std::string& addr, Peer& p) {
  router_->set(zmq::sockopt::connect_routing_id, p.rid);
  router_->connect(p.endpoint);
  by_rid_[p.rid] = addr;
  by_endpoint_[p.endpoint] = addr;
}

void SharedRouter::disconnect(const std::string& addr, Peer& p) {
  zmq_disconnect(router_->handle(), p.endpoint.c_str());
  by_rid_.erase(p.rid);
  if (auto it = by_endpoint_.find(p.endpoint); it != by_endpoint_.end() && it->second == addr) by_endpoint_.erase(it);
  if (auto it = by_fd_.find(p.fd); it != by_fd_.end() && it->second == addr) by_fd_.erase(it);
}

const std::string* SharedRouter::peer_of_rid(const std::string& rid) const {
  auto it = by_rid_.find(rid);
  return it == by_rid_.end() ? nullptr : &it->second;
}

// A connection being made is named by its endpoint, one made by its descriptor.
const std::string* SharedRouter::peer_of_event(const MonitorEvent& e) const {
  if (e.event == ZMQ_EVENT_DISCONNECTED) {
    auto it = by_fd_.find(static_cast<int>(e.value));
    return it == by_fd_.end() ? nullptr : &it->second;
  }
  auto it = by_endpoint_.find(e.endpoint);
  return it == by_endpoint_.end() ? nullptr : &it->second;
}

void SharedRouter::connected(const std::string& addr, Peer& p, int fd) {
  if (p.fd >= 0) by_fd_.erase(p.fd);
  p.fd = fd;
  by_fd_[fd] = addr;
}

Peer& Links::make(const std::string& addr) {
  // Links and accepted connections share the descriptors: a loop many peers connect to keeps
  // fewer links of its own.
  if (peers_.size() + accepted_.total() >= max_links_.load(std::memory_order_relaxed)) close_least_used();
  Peer p;
  std::string target = addr.substr(0, addr.find('/'));  // "host:port/lane": a connection of its own
  if (sealed_links_.count(addr) || target.size() != addr.size()) {
    link_own(addr, p, std::move(target));
  } else {
    p.curve = curve_for_host(host_of(target));
    p.endpoint = "tcp://" + target;
    link_shared(addr, p);
  }
  return peers_.emplace(addr, std::move(p)).first->second;
}

void Links::link_own(const std::string& addr, Peer& p, std::string target) {
  p.dealer = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  tune(*p.dealer);
  if (auto sealed = sealed_links_.find(addr); sealed != sealed_links_.end()) {
    // A data link (sealed_peer): plain ZeroMQ, every message sealed. It answers only requests for
    // parts, so ZMTP heartbeats notice a vanished peer here instead of PINGs (a data link is
    // made only for large transfers: a few per process).
    p.dealer->set(zmq::sockopt::heartbeat_ivl, 1000);
    p.dealer->set(zmq::sockopt::heartbeat_timeout, 4000);
    p.seal = std::make_unique<LinkSeal>(sealed->second.key);
    target = sealed->second.address;
  } else if (curve_for_host(host_of(target))) {
    p.curve = true;
    curve_client(*p.dealer, identity_.keys());
  }
  p.monitor = monitor_of(ctx_, *p.dealer, inproc_ + "-monitor-" + std::to_string(++monitor_seq_), kOwnLinkEvents);
  p.dealer->connect("tcp://" + target);
}

void Links::link_shared(const std::string& addr, Peer& p) {
  auto& s = shared_for(p);
  s.open(ctx_, inproc_ + (p.curve ? "-links-curve" : "-links"), p.curve ? &identity_.keys() : nullptr);
  p.rid = "l" + std::to_string(++link_seq_);
  s.connect(addr, p);
}

void Links::unlink(const std::string& addr, Peer& p) {
  if (p.dealer)
    zmq_socket_monitor(p.dealer->handle(), nullptr, 0);
  else
    shared_for(p).disconnect(addr, p);
}

void Links::on_dealer_readable(const std::string& addr, Peer& p) {
  for (int budget = 0; budget < 4096; ++budget) {
    Frames frames;
    zmq::message_t m;
    if (!p.dealer->recv(m, zmq::recv_flags::dontwait)) return;
    if (budget == 0) p.heard = Clock::now();
    bool more = m.more();
    frames.push_back(std::move(m));
    while (more) {
      zmq::message_t n;
      (void)p.dealer->recv(n, zmq::recv_flags::none);
      more = n.more();
      frames.push_back(std::move(n));
    }
    if (p.seal && !open_sealed(addr, p, frames)) return;  // the link was failed
    owner_.on_replies(addr, std::move(frames));
  }
}

bool Links::open_sealed(const std::string& addr, Peer& p, Frames& frames) {
  // A reply's value frame is opened straight into the room its request named (object_fetch.cc:
  // the part's place in the whole value), found by the request id in the opened envelope.
  auto land = [&](const char* first, size_t first_size, size_t index, size_t size) -> LinkSeal::Room {
    if (index != 1 || frames.size() != 2) return {};
    uint64_t id = 0;
    try {
      Frames envelope;
      envelope.emplace_back(first, first_size);
      id = InMessage(std::move(envelope)).env().getRequestId();
    } catch (const std::exception&) {
      return {};  // not an envelope: opening fails or the reader refuses it later
    } catch (const kj::Exception&) {
      return {};
    }
    return owner_.landing(addr, id, size);
  };
  if (p.seal->open(frames, SealedAs::reply, land)) return true;
  // Altered on the way, or not from the process that gave the key: nothing more on this link is
  // trusted. What was asked over it fails, and the asker may ask again over the encrypted link.
  std::string why = "a reply on the data link " + addr.substr(0, addr.find('#')) + " failed authentication";
  faults_.note(addr, why);
  owner_.on_link_failed(addr, why, wire::ErrorCode::UNAUTHENTICATED);
  return false;
}

void Links::on_shared_readable(SharedRouter& s) {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*s.router(), rid, frames)) return;
    auto* addr = s.peer_of_rid(std::string(static_cast<const char*>(rid.data()), rid.size()));
    if (!addr) continue;  // a closed link's late message
    std::string name = *addr;
    peers_.at(name).heard = Clock::now();
    owner_.on_replies(name, std::move(frames));
  }
}

void Links::on_shared_monitor(SharedRouter& s, bool idle_only) {
  if (!idle_only) {  // what an earlier reading held back comes first, in order
    auto held = std::move(held_events_);
    held_events_.clear();
    for (auto& [from, e] : held) {
      if (from == &s)
        apply_shared_event(s, e);
      else
        held_events_.emplace_back(from, std::move(e));
    }
  }
  while (auto e = next_monitor_event(*s.monitor())) {
    if (idle_only) {
      auto* addr = s.peer_of_event(*e);
      auto known = addr ? peers_.find(*addr) : peers_.end();
      if (known != peers_.end() && known->second.inflight > 0) {
        held_events_.emplace_back(&s, std::move(*e));
        continue;
      }
    }
    apply_shared_event(s, *e);
  }
}

void Links::apply_shared_event(SharedRouter& s, const MonitorEvent& e) {
  auto* addr = s.peer_of_event(e);
  auto pit = addr ? peers_.find(*addr) : peers_.end();
  if (pit == peers_.end()) return;  // a closed link's
  auto& p = pit->second;
  if (e.event == ZMQ_EVENT_CONNECTED) s.connected(pit->first, p, static_cast<int>(e.value));
  std::string name = pit->first;  // a failed link is erased
  on_link_event(name, p, e.event, ZMQ_EVENT_CLOSED);
}

bool Links::on_link_event(const std::string& addr, Peer& p, uint16_t event, uint16_t refusal) {
  if (event == ZMQ_EVENT_CONNECTED) {
    p.connected = true;
  } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    p.handshaken = true;
  } else if (handshake_failed(event) || (event == ZMQ_EVENT_DISCONNECTED && p.curve && !p.handshaken)) {
    owner_.on_link_failed(addr, refused_key(addr), wire::ErrorCode::UNAUTHENTICATED);
    return true;
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    owner_.on_link_failed(addr, "connection to " + addr + " was lost", wire::ErrorCode::WORKER_CRASHED);
    return true;
  } else if (event == refusal && !p.connected) {
    owner_.on_link_failed(addr, "cannot connect to " + addr + ": connection refused", wire::ErrorCode::UNAVAILABLE);
    return true;
  }
  return false;
}

void Links::on_own_monitor(const std::string& addr, Peer& p) {
  while (auto e = next_monitor_event(*p.monitor))
    if (on_link_event(addr, p, e->event, ZMQ_EVENT_CONNECT_RETRIED)) return;  // with reconnection, a refusal retries
}

}  // namespace yard::detail
