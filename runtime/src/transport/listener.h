// What a loop listens on: the ROUTER that other processes' requests arrive at, its monitor
// (connections counted and limited per peer, link_limits.h), the ZAP handler of an encrypted
// listener, and its data link (sealed_link.h). Requests are read, checked (the batch, the
// envelope, the cluster token) and handed to the loop's handler; the replies the turn makes go
// back to their requesters at the turn's end, batched per requester. Loop thread only, except
// where a member says otherwise.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "framing.h"
#include "link_limits.h"
#include "link_security.h"
#include "links.h"
#include "reply_sink.h"
#include "sealed_link.h"

namespace yard::detail {

// One request as the handler gets it.
struct Incoming {
  std::string routing_id;
  std::shared_ptr<InMessage> msg;  // shared by the calls of one pushTasks
  ReplySink* reply_to = nullptr;  // where its reply goes (reply_sink.h): set where it is queued
  int32_t call = -1;    // a pushTasks' call: its index (the message is one request otherwise)
  // That call, read once where the list was (each reading of a list counts all of it toward
  // the message's traversal limit).
  wire::PushTask::Reader call_reader;
  // The request's PushTask and id: the message's own, or its call's.
  wire::PushTask::Reader push_task() const;
  uint64_t request_id() const;
};
using RequestHandler = std::function<void(Incoming)>;

class Listener {
 public:
  // Binds tcp://host:port (port 0: an ephemeral port); beyond loopback, a CURVE server with a
  // data link beside it. Throws ConnectionError when it cannot.
  Listener(zmq::context_t& ctx, const std::string& inproc, const std::string& host, int port, const std::string& token,
           CurveIdentity& identity, FaultLog& faults, RequestHandler handler);

  const std::string& address() const { return address_; }
  const std::optional<DataLink>& data_link() const { return data_link_; }
  const ConnectionCount& connections() const { return connections_; }
  // Thread-safe. A ROUTER listening on `host` at a port of its own, with this listener's limits
  // and security, for another thread to own; *address is its "host:port".
  std::unique_ptr<zmq::socket_t> beside(const std::string& host, std::string* address);

  // The turn's poll items of the listener's sockets (from index `at`), and what they brought.
  size_t add_items(std::vector<zmq::pollitem_t>& items);
  void on_ready(const std::vector<zmq::pollitem_t>& items, size_t at);
  // A reply for its requester's next batch; flush() sends the turn's replies.
  void queue_reply(std::string routing_id, Frames frames);
  void flush();

 private:
  std::unique_ptr<zmq::socket_t> unbound();  // tuned, and a CURVE server when encrypted
  void bind(const std::string& host, int port);
  void listen_for_data(const std::string& host, const std::string& inproc);
  void on_requests();
  void on_data_requests();
  void take_request(const std::string& routing, const std::string& from, Received received);
  // Answers an error to `routing` (answers to peers that did not show the token carry none).
  void refuse(const std::string& routing, const std::string& token, uint64_t id, wire::ErrorCode code,
              const std::string& why);
  void on_accepts(zmq::socket_t& monitor);  // a listener's monitor: counts and limits connections

  zmq::context_t& ctx_;
  const std::string& token_;
  CurveIdentity& identity_;
  FaultLog& faults_;
  RequestHandler handler_;
  std::unique_ptr<zmq::socket_t> zap_;  // the ZAP handler of an encrypted listener
  std::unique_ptr<zmq::socket_t> router_, monitor_;
  std::string address_;
  std::optional<DataLink> data_link_;  // an encrypted listener's data link
  std::unique_ptr<zmq::socket_t> data_router_, data_monitor_;
  std::unique_ptr<LinkSeal> data_seal_;
  ConnectionCount connections_{link_limits()};
  std::vector<std::pair<std::string, Frames>> out_;  // replies made this turn
};

}  // namespace yard::detail
