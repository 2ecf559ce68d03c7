// The I/O loop's data link (io_loop.h, sealed_link.h): a listener beside an encrypted one, where
// every message is sealed with a key of this process's own, and the sealed links to other
// processes' data links.
#include <spdlog/spdlog.h>

#include "io_loop.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::detail {

void IoLoop::listen_for_data(const std::string& host) {
  data_router_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
  tune(*data_router_);
  data_router_->set(zmq::sockopt::router_mandatory, 0);
  // Its connections count against the same per-peer limit as the encrypted listener's.
  if (zmq_socket_monitor(data_router_->handle(), (inproc_ + "-data-monitor").c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
    throw zmq::error_t();
  data_monitor_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pair);
  data_monitor_->set(zmq::sockopt::linger, 0);
  data_monitor_->connect(inproc_ + "-data-monitor");
  try {
    data_router_->bind("tcp://" + host + ":*");
  } catch (const zmq::error_t& e) {
    throw ConnectionError("cannot listen for the data link on " + host + ": " + e.what());
  }
  std::string last = data_router_->get(zmq::sockopt::last_endpoint);
  data_link_ = DataLink{host + ":" + last.substr(last.rfind(':') + 1), LinkSeal::make_key()};
  data_seal_ = std::make_unique<LinkSeal>(data_link_->key);
}

std::string IoLoop::sealed_peer(const DataLink& link) {
  // Tagged with a digest of the key (the name shows in logs; the key must not).
  std::string tag = sys::sha256_hex(link.key.data(), link.key.size()).substr(0, 8);
  std::string name = "sealed:" + link.address + "#" + tag;
  sealed_links_[name] = link;
  return name;
}

void IoLoop::on_data_readable() {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*data_router_, rid, frames)) return;
    std::string from = frames.empty() ? std::string("unknown") : frame_peer_address(frames[0]);
    // Not sealed with this process's key: dropped unanswered (the sender learns nothing).
    if (!data_seal_->open(frames, SealedAs::request)) {
      fault(from, "dropped a message on the data link " + data_link_->address + " that is not sealed with its key");
      continue;
    }
    std::string routing = kDataRouting + std::string(static_cast<const char*>(rid.data()), rid.size());
    std::vector<Received> msgs;
    try {
      msgs = received_of(frames);
    } catch (const DecodeError& e) {
      fault(from, std::string("dropped a malformed batch on the data link ") + data_link_->address + ": " + e.what());
      continue;
    }
    for (auto& m : msgs) take_request(routing, from, std::move(m));
  }
}

bool IoLoop::open_replies(const std::string& addr, Peer& p, Frames& frames) {
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
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.peer != addr || !it->second.landing.data || size > it->second.landing.size)
      return {};
    return {it->second.landing.data, it->second.landing.keep};
  };
  if (p.seal->open(frames, SealedAs::reply, land)) return true;
  // Altered on the way, or not from the process that gave the key: nothing more on this link is
  // trusted. What was asked over it fails, and the asker may ask again over the encrypted link.
  fault(addr, "a reply on the data link " + addr.substr(0, addr.find('#')) + " failed authentication");
  fail_peer(addr, "a reply on the data link " + addr.substr(0, addr.find('#')) + " failed authentication",
            wire::ErrorCode::UNAUTHENTICATED);
  return false;
}

}  // namespace yard::detail
