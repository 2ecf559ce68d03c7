// The I/O loop's links to its peers: the connections its requests leave by and its replies come
// back over (links.cc: finding and keeping them; link_sockets.cc: the sockets and what their
// monitors say).
//
// Most links share one ROUTER of their kind (plain or encrypted), each connection under a
// routing id of its own and all watched by one monitor: a link costs one descriptor and no
// ZeroMQ socket, so a head or a driver linked to thousands of nodes makes and drops links without
// opening and closing sockets. Lanes ("host:port/N") and sealed data links, a few per process,
// keep a DEALER and a monitor each. A link's requests are queued in its outbox and leave at the
// end of the loop's turn (flush), several as one batch (wire.h). Only links with requests in
// flight are polled and watched for silence: idle links cost nothing, however many there are.
// Loop thread only, except where a member says otherwise.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "framing.h"
#include "link_limits.h"
#include "link_security.h"
#include "sealed_link.h"

namespace yard::detail {

// One link to a peer.
struct Peer {
  std::unique_ptr<zmq::socket_t> dealer;  // a link of its own (a lane, a data link); else null
  std::unique_ptr<zmq::socket_t> monitor;
  std::string rid;       // a shared link's routing id on its ROUTER, unique per link
  std::string endpoint;  // a shared link's "tcp://host:port", as its monitor's events name it
  int fd = -1;           // a shared link's connection once made (its later events name only that)
  bool connected = false;
  bool curve = false;       // an encrypted link (link_security.h)
  bool handshaken = false;  // its handshake succeeded
  std::unique_ptr<LinkSeal> seal;  // a sealed data link: every message sealed and opened
  std::vector<Frames> outbox;      // requests made this turn, sent by flush()
  BatchWriter batch{batch_cap()};  // and after them, those written straight into a batch
  size_t inflight = 0;             // requests awaiting a reply: the link is polled while > 0
  Clock::time_point last_used;     // when it last went idle
  Clock::time_point heard;         // its last message, or the request that ended its idleness
  bool probing = false;            // a PING is out to it (IoLoop's probe of silent peers)

  bool queued() const { return !outbox.empty() || !batch.empty(); }
  void close_batch();                // the batch written so far joins the outbox, in order
  void queue_message(OutMessage& m);  // into the batch, or alone
  void queue_frames(Frames frames);   // after the batch written so far
};

// What a link's traffic and fate reach: the requests sent over it.
class LinkOwner {
 public:
  virtual ~LinkOwner() = default;
  // A message of replies (one, or a batch) from `addr`.
  virtual void on_replies(const std::string& addr, Frames frames) = 0;
  // The link to `addr` is lost or refused: its requests fail with `code` and `why`, and the
  // link is removed (Links::remove).
  virtual void on_link_failed(const std::string& addr, const std::string& why, wire::ErrorCode code) = 0;
  // Room that a sealed reply's value frame may be opened into (its request's landing).
  virtual LinkSeal::Room landing(const std::string& addr, uint64_t request_id, size_t size) = 0;
};

// The faults a loop notes: counted, and logged at a bounded rate per peer.
class FaultLog {
 public:
  void note(const std::string& peer, const std::string& what);  // loop thread only
  uint64_t count() const { return count_.load(); }

 private:
  std::atomic<uint64_t> count_{0};
  PeerFaults faults_;
};

// An encrypted data link of another process (sealed_link.h): its address and key.
struct DataLink {
  std::string address, key;
};

// The ROUTER that a kind of link (plain or encrypted) shares, its monitor, and the maps from
// what its messages and events name back to the peer.
class SharedRouter {
 public:
  // The ROUTER, made on first use (`curve`: a CURVE client with the cluster's keys).
  zmq::socket_t& open(zmq::context_t& ctx, const std::string& monitor_endpoint, const CurveKeys* curve);
  zmq::socket_t* router() const { return router_.get(); }
  zmq::socket_t* monitor() const { return monitor_.get(); }
  void connect(const std::string& addr, Peer& p);  // p.rid and p.endpoint set
  void disconnect(const std::string& addr, Peer& p);
  // The peer a message's routing id names, or a monitor event (null: a closed link's).
  const std::string* peer_of_rid(const std::string& rid) const;
  const std::string* peer_of_event(const MonitorEvent& e) const;
  void connected(const std::string& addr, Peer& p, int fd);  // its later events name this descriptor

 private:
  std::unique_ptr<zmq::socket_t> router_, monitor_;
  std::unordered_map<std::string, std::string> by_rid_;       // routing id -> peer
  std::unordered_map<std::string, std::string> by_endpoint_;  // endpoint -> peer
  std::unordered_map<int, std::string> by_fd_;                // connection -> peer
};

// The sockets of the links that one turn polls, and where they are in the turn's items.
struct LinkPoll {
  size_t own_at = 0;
  std::vector<std::string> own;  // links of their own: a DEALER and its monitor each
  size_t shared_at = 0;
  bool shared[2] = {false, false};  // a shared ROUTER made during the turn waits for the next
};

class Links {
 public:
  using PeerMap = std::map<std::string, Peer>;
  // `accepted`: the connections the loop's listeners hold, which share the link limit.
  Links(zmq::context_t& ctx, std::string inproc, CurveIdentity& identity, const ConnectionCount& accepted,
        FaultLog& faults, LinkOwner& owner);

  // Thread-safe settings: the link limit, how long a link may stay idle, how long a peer owing
  // replies may stay silent (link_limits.h has the defaults).
  void set_max_links(size_t n) { max_links_ = n; }
  void set_idle_link(std::chrono::milliseconds idle) { idle_link_ms_ = idle.count(); }
  void set_silence_limit(std::chrono::milliseconds limit) { silence_ms_ = limit.count(); }
  std::chrono::milliseconds silence_limit() const { return std::chrono::milliseconds(silence_ms_.load()); }
  // How often idle links are looked for: every kIdleSweep, or every idle time if shorter.
  std::chrono::milliseconds idle_sweep() const;
  size_t count() const { return peers_.size(); }

  // The link a request to `addr` goes over, made when there is none (throws zmq::error_t when it
  // cannot be). A link with nothing in flight is not polled: what its monitor said meanwhile (it
  // was lost, say) is heard first, and a lost one is made again.
  Peer& for_request(const std::string& addr);
  // A request is out on the link / answered or given up.
  void begin(Peer& p, const std::string& addr);
  void settle(Peer* p, const std::string& addr);
  // A message for the link's next batch (flush sends it).
  void queue_message(Peer& p, const std::string& addr, OutMessage& m);
  void queue_frames(Peer& p, const std::string& addr, Frames frames);
  void flush();  // each link's queued requests leave

  // The turn's poll items of the busy links, and what was found ready on them.
  LinkPoll add_items(std::vector<zmq::pollitem_t>& items);
  void on_ready(const std::vector<zmq::pollitem_t>& items, const LinkPoll& poll);

  void remove(const std::string& addr);  // a failed link (its requests failed by its owner)
  void close_idle(Clock::time_point now);
  // The busy links silent for the silence limit (to fail), and those silent long enough to be
  // sent a PING (marked as probed; probe_answered clears it).
  struct Silent {
    std::vector<std::string> gone, ask;
  };
  Silent silent(Clock::time_point now);
  void probe_answered(const std::string& addr);
  // The peer name under which requests go sealed to another process's data link (one name per
  // address and key).
  std::string sealed_peer(const DataLink& link);

 private:
  static constexpr std::chrono::milliseconds kIdleSweep{5000};
  Peer& make(const std::string& addr);
  void link_own(const std::string& addr, Peer& p, std::string target);
  void link_shared(const std::string& addr, Peer& p);
  void unlink(const std::string& addr, Peer& p);  // its connection closed (its Peer stays)
  PeerMap::iterator close_link(PeerMap::iterator it);
  void close_least_used();  // at the link limit: the least recently used quarter of idle links
  SharedRouter& shared_for(const Peer& p) { return shared_[p.curve ? 1 : 0]; }
  void on_dealer_readable(const std::string& addr, Peer& p);
  bool open_sealed(const std::string& addr, Peer& p, Frames& frames);
  void on_shared_readable(SharedRouter& s);
  // What a shared monitor said (`idle_only`: applied only to links with nothing in flight; the
  // rest wait for the turn's own reading, as failing them would call their requests' callbacks
  // from inside a request being made).
  void on_shared_monitor(SharedRouter& s, bool idle_only = false);
  void apply_shared_event(SharedRouter& s, const MonitorEvent& e);
  void on_own_monitor(const std::string& addr, Peer& p);
  // One monitor event for a link: marks it connected or handshaken, or fails it (true: the Peer
  // is gone). `refusal`: the event that means its connection was refused.
  bool on_link_event(const std::string& addr, Peer& p, uint16_t event, uint16_t refusal);

  zmq::context_t& ctx_;
  std::string inproc_;  // the loop's prefix for its monitors' endpoints
  CurveIdentity& identity_;
  const ConnectionCount& accepted_;
  FaultLog& faults_;
  LinkOwner& owner_;
  std::atomic<size_t> max_links_{link_limits().max_links};
  std::atomic<int64_t> idle_link_ms_{link_limits().idle_link_s * 1000};
  std::atomic<int64_t> silence_ms_{link_limits().silence_ms};
  PeerMap peers_;
  SharedRouter shared_[2];  // plain and encrypted links, made on first use
  std::vector<std::pair<SharedRouter*, MonitorEvent>> held_events_;  // shared monitors' events for busy links
  std::unordered_map<std::string, DataLink> sealed_links_;           // sealed peer name -> its data link
  // The peer of the last request (a value of peers_), forgotten when a peer is removed.
  std::string last_addr_;
  Peer* last_ = nullptr;
  // The links with requests in flight, the only ones polled: a process that has talked to
  // thousands of peers pays per turn only for the busy ones.
  std::set<std::string> active_;
  std::vector<std::string> dirty_;  // peers with something queued
  uint64_t monitor_seq_ = 0, link_seq_ = 0;
  Clock::time_point next_idle_sweep_{}, next_probe_scan_{};
};

}  // namespace yard::detail
