// IoLoop: the one thread of a process that owns its ZeroMQ sockets, and the door other threads
// use to reach them.
//
// Its parts, each owning its state: the Listener (listener.h) where other processes' requests
// arrive and its replies leave; the Links (links.h) its own requests leave by; the Requests
// (requests.h) it awaits replies to; the PostBox (post_box.h) through which other threads hand
// it work; its Timers (timers.h). One turn of the loop: drain what was handed over, take what
// the sockets brought, run due timers and expiries, then the turn's end hooks, and send what the
// turn queued, several messages to one peer as one batch (wire.h), in the order they were made.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "framing.h"
#include "link_security.h"
#include "links.h"
#include "listener.h"
#include "post_box.h"
#include "reply_callback.h"
#include "requests.h"
#include "timers.h"
#include "wire.h"

namespace yard::detail {

class IoLoop {
 public:
  using Clock = detail::Clock;
  using Incoming = detail::Incoming;
  // Runs on the loop thread for every decoded request arriving at its listener.
  using RequestHandler = detail::RequestHandler;
  // Runs on the loop thread with the reply, or with the local error (lost peer, deadline).
  using ReplyCallback = detail::ReplyCallback;
  using Landing = ReplyLanding;
  using DataLink = detail::DataLink;

  // Binds tcp://host:port (port 0: an ephemeral port). Throws ConnectionError when it cannot.
  // Loops of one process may share a ZeroMQ context (`shared`, from make_io_context), and with
  // it its I/O threads: thousands of loops (simulated nodes) then cost a thread each, not three.
  // An encrypted listener always has a context of its own.
  IoLoop(const std::string& host, int port, std::string token, RequestHandler handler,
         std::shared_ptr<zmq::context_t> shared = nullptr);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // "host:port" that peers connect to.
  const std::string& address() const { return listener_.address(); }
  const std::string& token() const { return token_; }
  uint64_t next_request_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Before any request: how long a peer owing replies may stay silent (default: the process's
  // link_limits().silence_ms); how many connections this loop keeps at most, its links and those
  // its listener accepted together (default link_limits().max_links); how long a link may go
  // unused before it is closed (default link_limits().idle_link_s).
  void set_silence_limit(std::chrono::milliseconds limit) { links_.set_silence_limit(limit); }
  void set_max_links(size_t n) { links_.set_max_links(n); }
  void set_idle_link(std::chrono::milliseconds idle) { links_.set_idle_link(idle); }
  // Thread-safe: how many links it has now (asked of the loop thread).
  size_t link_count();

  // Thread-safe. Sends a request built with `id` (from next_request_id) to peer "host:port", or
  // "host:port/N": the same peer over a connection of its own (lane N), for transfers spread
  // over several connections.
  void request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb,
               std::chrono::milliseconds timeout, Landing landing = {});
  // The same with the request's message: made on the loop thread, it is written straight into
  // its peer's next batch (wire.h's BatchWriter), with no frame of its own.
  void request(const std::string& peer, uint64_t id, OutMessage& m, ReplyCallback cb,
               std::chrono::milliseconds timeout, Landing landing = {});
  // Several requests in one message (an actor's calls made together, pushTasks): the reply to
  // each id goes to its callback.
  void request_group(const std::string& peer, OutMessage& m, std::vector<std::pair<uint64_t, ReplyCallback>> calls,
                     std::chrono::milliseconds timeout);
  // Thread-safe. Sends a reply to the requester `routing_id`.
  void reply(std::string routing_id, Frames frames);
  // Thread-safe. The same, for a sender with more replies coming at once (an executor with calls
  // queued): the replies made in the next kReplyHold join the loop's next turn, so a burst of
  // calls answered one after another leaves in a few batches instead of waking the loop once
  // each. A reply waits at most kReplyHold.
  void reply_soon(std::string routing_id, Frames frames);
  static constexpr auto kReplyHold = PostBox::kReplyHold;
  // Thread-safe. Runs fn on the loop thread.
  void post(std::function<void()> fn) { post_box_.post(std::move(fn)); }
  // Loop thread only: runs fn every `period`; once, `delay` from now.
  void every(std::chrono::milliseconds period, std::function<void()> fn) { timers_.every(period, std::move(fn)); }
  void after(std::chrono::milliseconds delay, std::function<void()> fn) { timers_.after(delay, std::move(fn)); }
  // Loop thread only: runs fn at the end of every turn, before what the turn queued is sent (a
  // daemon writes the turn's records there, in one round trip, before any answer leaves).
  void before_sending(std::function<void()> fn) { timers_.before_sending(std::move(fn)); }
  // Loop thread only: runs fn once, at the end of this turn (before before_sending): what a
  // turn's replies free, for one, is used once for all of them.
  void at_turn_end(std::function<void()> fn) { timers_.at_turn_end(std::move(fn)); }
  bool in_loop() const { return std::this_thread::get_id() == thread_.get_id(); }
  void stop();
  // The process is ending: requests that fail from now on (its peers may go first) are reported
  // with LocalError::shutdown, as those still pending at stop() are.
  void closing() { requests_.closing(); }

  // Blocking helper for threads other than the loop: sends and waits for the reply.
  // Throws ConnectionError on a lost peer, TimeoutError on the deadline.
  std::unique_ptr<InMessage> call(const std::string& peer, OutMessage& msg, uint64_t id,
                                  std::chrono::milliseconds timeout);

  // Counters for tests and status: malformed or unauthenticated messages, refused handshakes.
  uint64_t malformed_count() const { return faults_.count(); }
  // Thread-safe. Counts and logs (rate-limited) a bad message from `peer` that another listener
  // of this process refused.
  void note_fault(const std::string& peer, const std::string& what);
  // Thread-safe. A ROUTER listening on `host` at a port of its own, with this loop's limits and
  // security (an encrypted listener's handshakes are judged by this loop's ZAP handler), for
  // another thread to own; *address is its "host:port". Throws ConnectionError.
  std::unique_ptr<zmq::socket_t> listener_beside(const std::string& host, std::string* address) {
    return listener_.beside(host, address);
  }
  // An encrypted listener's data link (sealed_link.h): a second, plain listener where every
  // message is sealed with its key, for the parts of large values; nullopt on loopback.
  const std::optional<DataLink>& data_link() const { return listener_.data_link(); }
  // Loop thread only: the peer name under which requests go sealed to another process's data
  // link (one name per address and key).
  std::string sealed_peer(const DataLink& link) { return links_.sealed_peer(link); }

 private:
  void run();
  void turn();
  // How long a turn may wait: until the next timer, the end of a reply hold, or a sweep.
  std::chrono::milliseconds turn_wait(Clock::time_point now) const;
  void drain_posted();
  // A request queued on the loop thread for its peer's next batch.
  void enqueue_request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb,
                       std::chrono::milliseconds timeout, Landing landing);
  // PINGs the silent peers that owe replies, and fails those silent too long.
  void probe_silent(Clock::time_point now);

  std::shared_ptr<zmq::context_t> ctx_;  // declared first: the sockets go before it
  std::string inproc_;                   // this loop's prefix for its monitors' endpoints
  std::string token_;
  CurveIdentity identity_;
  FaultLog faults_;
  PostBox post_box_;
  Timers timers_;
  Poller poller_;
  Listener listener_;
  Requests requests_;
  Links links_;
  std::atomic<bool> running_{true};
  std::atomic<uint64_t> next_id_{1};
  std::vector<zmq::pollitem_t> items_;  // the turn's, kept between turns
  std::thread thread_;
};

}  // namespace yard::detail
