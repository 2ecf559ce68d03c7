#include "listener.h"

#include <sys/socket.h>

#include <unordered_map>

#include <spdlog/spdlog.h>

#include "yard/errors.h"

namespace yard::detail {

Listener::Listener(zmq::context_t& ctx, const std::string& inproc, const std::string& host, int port,
                   const std::string& token, CurveIdentity& identity, FaultLog& faults, RequestHandler handler)
    : ctx_(ctx), token_(token), identity_(identity), faults_(faults), handler_(std::move(handler)) {
  if (curve_for_host(host)) {
    // Listening beyond loopback: CURVE, admitting only holders of the cluster's key. The ZAP
    // handler is bound before any handshake can happen.
    zap_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::rep);
    zap_->set(zmq::sockopt::linger, 0);
    zap_->bind("inproc://zeromq.zap.01");
  }
  router_ = unbound();
  // Connections are counted per peer as they are accepted; refused handshakes of an encrypted
  // listener are reported.
  monitor_ = monitor_of(ctx_, *router_, inproc + "-router-monitor",
                        ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  bind(host, port);
  if (curve_for_host(host)) listen_for_data(host, inproc);
}

void Listener::bind(const std::string& host, int port) {
  std::string ep = "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
  try {
    router_->bind(ep);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE)
      throw ConnectionError("cannot listen on " + host + ":" + std::to_string(port) + ": the port is already in use");
    throw ConnectionError("cannot listen on " + host + ":" + std::to_string(port) + ": " + e.what());
  }
  address_ = bound_address(*router_, host);
}

std::unique_ptr<zmq::socket_t> Listener::unbound() {
  auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
  tune(*s);
  s->set(zmq::sockopt::router_mandatory, 0);
  if (zap_) {
    s->set(zmq::sockopt::curve_server, 1);
    s->set(zmq::sockopt::curve_secretkey, identity_.keys().secret_z85);
    s->set(zmq::sockopt::zap_domain, "yard");
  }
  return s;
}

std::unique_ptr<zmq::socket_t> Listener::beside(const std::string& host, std::string* address) {
  auto s = unbound();
  try {
    s->bind("tcp://" + host + ":*");
  } catch (const zmq::error_t& e) {
    throw ConnectionError("cannot listen on " + host + ": " + e.what());
  }
  *address = bound_address(*s, host);
  return s;
}

size_t Listener::add_items(std::vector<zmq::pollitem_t>& items) {
  size_t at = items.size();
  items.push_back({router_->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({monitor_->handle(), 0, ZMQ_POLLIN, 0});
  if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
  if (data_router_) {
    items.push_back({data_router_->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({data_monitor_->handle(), 0, ZMQ_POLLIN, 0});
  }
  return at;
}

void Listener::on_ready(const std::vector<zmq::pollitem_t>& items, size_t at) {
  auto ready = [&](size_t i) { return (items[at + i].revents & ZMQ_POLLIN) != 0; };
  if (ready(1)) on_accepts(*monitor_);
  size_t next = 2;
  if (zap_ && ready(next++))
    answer_zap(*zap_, identity_.keys().public_z85, [this](const std::string& peer, const std::string& why) {
      faults_.note(peer, "refused a connection to " + address_ + ": " + why);
    });
  if (ready(0)) on_requests();
  if (data_router_) {
    if (ready(next + 1)) on_accepts(*data_monitor_);
    if (ready(next)) on_data_requests();
  }
}

void Listener::queue_reply(std::string routing_id, Frames frames) {
  out_.emplace_back(std::move(routing_id), within_limit(std::move(frames), token_));
}

void Listener::flush() {
  if (out_.empty()) return;
  // Replies grouped by requester, each group in the order made.
  std::vector<std::pair<std::string, std::vector<Frames>>> groups;
  std::unordered_map<std::string, size_t> at;
  size_t last = 0;
  for (auto& [rid, fr] : out_) {
    // Most replies of a turn go to the requester of the one before.
    if (groups.empty() || groups[last].first != rid) {
      auto [it, fresh] = at.emplace(rid, groups.size());
      if (fresh) groups.emplace_back(rid, std::vector<Frames>{});
      last = it->second;
    }
    groups[last].second.push_back(std::move(fr));
  }
  out_.clear();
  for (auto& [rid, msgs] : groups) {
    if (!via_data_link(rid)) {
      send_batched(*router_, &rid, msgs);
    } else if (data_router_) {
      std::string data_rid = rid.substr(1);
      send_batched(*data_router_, &data_rid, msgs, data_seal_.get(), SealedAs::reply);
    }
  }
}

void Listener::on_requests() {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*router_, rid, frames)) return;
    std::string routing(static_cast<const char*>(rid.data()), rid.size());
    std::string from = frames.empty() ? std::string("unknown") : frame_peer_address(frames[0]);
    if (via_data_link(routing)) {
      // ZeroMQ's own routing ids begin with a zero byte; this one was chosen by the peer, and
      // would be taken for the data link's: nothing it sends is read.
      faults_.note(from, "dropped a message on " + address_ + " from a peer that chose its own routing id");
      continue;
    }
    std::vector<Received> msgs;
    try {
      msgs = received_of(frames);
    } catch (const DecodeError& e) {
      faults_.note(from, std::string("dropped a malformed batch on ") + address_ + ": " + e.what());
      refuse(routing, "", 0, wire::ErrorCode::BAD_REQUEST, e.what());
      continue;
    }
    for (auto& m : msgs) take_request(routing, from, std::move(m));
  }
}

void Listener::refuse(const std::string& routing, const std::string& token, uint64_t id, wire::ErrorCode code,
                      const std::string& why) {
  OutMessage out(token, id, true);
  set_error(out.env(), code, why);
  out_.emplace_back(routing, out.finish());
}

void Listener::take_request(const std::string& routing, const std::string& from, Received received) {
  std::unique_ptr<InMessage> msg;
  try {
    msg = std::move(received).open();
  } catch (const DecodeError& e) {
    faults_.note(from, std::string("dropped a malformed message on ") + address_ + ": " + e.what());
    return refuse(routing, "", 0, wire::ErrorCode::BAD_REQUEST, e.what());
  }
  uint64_t id = msg->env().getRequestId();
  if (msg->token() != token_) {
    bool missing = msg->token().size() == 0;
    faults_.note(from, "refused a request on " + address_ + " with a " + (missing ? "missing" : "wrong") + " cluster token");
    return refuse(routing, "", id, wire::ErrorCode::UNAUTHENTICATED, missing ? "missing cluster token" : "wrong cluster token");
  }
  if (msg->env().getBody().isPing() && !via_data_link(routing)) {  // a liveness probe: answered here
    OutMessage out(token_, id, true);
    out.env().getBody().setOk();
    out_.emplace_back(routing, out.finish());
    return;
  }
  if (via_data_link(routing) && !msg->env().getBody().isGetObjectPart()) {
    faults_.note(from, "refused a request on the data link of " + address_ + " that is not for an object's part");
    return refuse(routing, token_, id, wire::ErrorCode::BAD_REQUEST, "a data link answers only requests for parts of objects");
  }
  std::shared_ptr<InMessage> shared = std::move(msg);
  int32_t calls = -1;  // a pushTasks: each of its calls is handled as a request of its own
  capnp::List<wire::PushTask>::Reader list;
  try {
    auto body = shared->env().getBody();
    if (body.isPushTasks()) {
      list = body.getPushTasks();
      calls = static_cast<int32_t>(list.size());
    }
  } catch (const kj::Exception& e) {
    faults_.note(from, "dropped a malformed message on " + address_ + ": " + e.getDescription().cStr());
    return refuse(routing, token_, id, wire::ErrorCode::BAD_REQUEST, "malformed calls");
  }
  auto handle = [&](int32_t call) {
    try {
      handler_(Incoming{routing, shared, nullptr, call, call < 0 ? wire::PushTask::Reader() : list[unsigned(call)]});
    } catch (const std::exception& e) {
      spdlog::error("request handler failed: {}", e.what());
    } catch (const kj::Exception& e) {
      spdlog::error("request handler failed: {}", e.getDescription().cStr());
    }
  };
  if (calls < 0) return handle(-1);
  if (calls == 0) refuse(routing, token_, id, wire::ErrorCode::BAD_REQUEST, "an empty list of calls");
  for (int32_t i = 0; i < calls; ++i) handle(i);
}

void Listener::on_accepts(zmq::socket_t& monitor) {
  while (auto e = next_monitor_event(monitor)) {
    int fd = static_cast<int>(e->value);
    if (e->event == ZMQ_EVENT_ACCEPTED) {
      std::string peer = socket_peer(fd);
      if (auto why = connections_.accept(fd, peer)) {
        // Shutting the socket down makes ZeroMQ see it closed and drop the connection itself.
        ::shutdown(fd, SHUT_RDWR);
        faults_.note(peer, "refused a connection to " + address_ + ": " + *why);
      }
      continue;
    }
    if (e->event == ZMQ_EVENT_DISCONNECTED) {
      connections_.closed(fd);
      continue;
    }
    // A client with another key fails before the ZAP handler hears of it, and the event names
    // only the listening end: the peer's address is unknown here.
    faults_.note("a peer", "refused a connection to " + address_ + ": the encrypted handshake failed (a key that is not "
                           "the cluster's: a wrong cluster token, or a client that does not encrypt)");
  }
}

wire::PushTask::Reader Incoming::push_task() const {
  return call < 0 ? msg->env().getBody().getPushTask() : call_reader;
}

uint64_t Incoming::request_id() const { return call < 0 ? msg->env().getRequestId() : push_task().getRequestId(); }

}  // namespace yard::detail
