// A listener's data link (listener.h, sealed_link.h): a second, plain listener beside an
// encrypted one, where every message is sealed with a key of this process's own, for the parts
// of large values.
#include "listener.h"

#include "yard/errors.h"

namespace yard::detail {

void Listener::listen_for_data(const std::string& host, const std::string& inproc) {
  data_router_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
  tune(*data_router_);
  data_router_->set(zmq::sockopt::router_mandatory, 0);
  // Its connections count against the same per-peer limit as the encrypted listener's.
  data_monitor_ = monitor_of(ctx_, *data_router_, inproc + "-data-monitor", ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
  try {
    data_router_->bind("tcp://" + host + ":*");
  } catch (const zmq::error_t& e) {
    throw ConnectionError("cannot listen for the data link on " + host + ": " + e.what());
  }
  data_link_ = DataLink{bound_address(*data_router_, host), LinkSeal::make_key()};
  data_seal_ = std::make_unique<LinkSeal>(data_link_->key);
}

void Listener::on_data_requests() {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*data_router_, rid, frames)) return;
    std::string from = frames.empty() ? std::string("unknown") : frame_peer_address(frames[0]);
    // Not sealed with this process's key: dropped unanswered (the sender learns nothing).
    if (!data_seal_->open(frames, SealedAs::request)) {
      faults_.note(from, "dropped a message on the data link " + data_link_->address + " that is not sealed with its key");
      continue;
    }
    std::string routing = kDataRouting + std::string(static_cast<const char*>(rid.data()), rid.size());
    std::vector<Received> msgs;
    try {
      msgs = received_of(frames);
    } catch (const DecodeError& e) {
      faults_.note(from, std::string("dropped a malformed batch on the data link ") + data_link_->address + ": " + e.what());
      continue;
    }
    for (auto& m : msgs) take_request(routing, from, std::move(m));
  }
}

}  // namespace yard::detail
