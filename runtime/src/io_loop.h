// IoLoop: the one thread of a process that owns its ZeroMQ sockets.
//
// It binds a ROUTER for requests from others. Its requests to others leave through one ROUTER
// that connects to every peer (one for plain links, one for encrypted ones), each connection
// under a routing id of its own and all watched by one monitor: a link costs one descriptor and
// no ZeroMQ socket, so a head or a driver linked to thousands of nodes makes and drops links
// without opening and closing sockets. Lanes ("host:port/N") and sealed data links, a few per
// process, keep a DEALER and a monitor each. Other threads hand it work through post(), which
// queues a closure and wakes the loop through an eventfd; replies complete callbacks on the loop
// thread. Messages are queued and leave at the end of the loop's turn, several to one peer as one
// batch (wire.h), in the order they were made. A request fails locally (never hangs) when its
// deadline passes or when the connection to its peer is lost or refused: that is how a crashed
// worker or a wrong address is noticed. A refused connection (nothing delivered) fails with
// UNAVAILABLE, a lost one with WORKER_CRASHED.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <poll.h>

#include <zmq.hpp>

#include "link_limits.h"
#include "link_security.h"
#include "reply_callback.h"
#include "sealed_link.h"
#include "wire.h"

namespace yard::detail {

// Room where the value frame of a reply may be written as it is opened, when the peer is a
// sealed one (IoLoop::sealed_peer): the reply's frame then points into it, with no copy. `keep`
// holds the room while the request is pending.
struct ReplyLanding {
  char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keep;
};

// The sender's address of a received frame ("unknown" when the transport does not say).
std::string frame_peer_address(zmq::message_t& m);

class IoLoop {
 public:
  using Clock = std::chrono::steady_clock;
  struct Incoming {
    std::string routing_id;
    std::shared_ptr<InMessage> msg;  // shared by the calls of one pushTasks
    bool direct = false;  // came in on a call port (call_port.h), answered there
    int32_t call = -1;    // a pushTasks' call: its index (the message is one request otherwise)
    // That call, read once where the list was (each reading of a list counts all of it toward
    // the message's traversal limit).
    wire::PushTask::Reader call_reader;
    // The request's PushTask and id: the message's own, or its call's.
    wire::PushTask::Reader push_task() const;
    uint64_t request_id() const;
  };
  // Runs on the loop thread for every decoded request arriving at the ROUTER.
  using RequestHandler = std::function<void(Incoming)>;
  // Runs on the loop thread with the reply, or with the local error (lost peer, deadline).
  using ReplyCallback = detail::ReplyCallback;

  // Binds tcp://host:port (port 0: an ephemeral port). Throws ConnectionError when it cannot.
  // Loops of one process may share a ZeroMQ context (`shared`, from make_context), and with it
  // its I/O threads: thousands of loops (simulated nodes) then cost a thread each, not three. An
  // encrypted listener always has a context of its own.
  IoLoop(const std::string& host, int port, std::string token, RequestHandler handler,
         std::shared_ptr<zmq::context_t> shared = nullptr);
  static std::shared_ptr<zmq::context_t> make_context(int io_threads);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // "host:port" that peers connect to.
  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  uint64_t next_request_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Before any request: how long a peer owing replies may stay silent (default: the process's
  // link_limits().silence_ms).
  void set_silence_limit(std::chrono::milliseconds limit) { silence_ms_ = limit.count(); }
  // How many connections this loop keeps at most, its links and those its listeners accepted
  // together (default link_limits().max_links), and how many links it has now (thread-safe:
  // asked of the loop thread).
  void set_max_links(size_t n) { max_links_ = n; }
  // How long a link may go unused before it is closed (default link_limits().idle_link_s).
  void set_idle_link(std::chrono::milliseconds idle) { idle_link_ms_ = idle.count(); }
  size_t link_count();

  // Thread-safe. Sends a request built with `id` (from next_request_id) to peer "host:port", or
  // "host:port/N": the same peer over a connection of its own (lane N), for transfers spread
  // over several connections.
  using Landing = ReplyLanding;
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
  // The most a batch holds: kBatchMaxBytes, or the message limit when lower.
  static size_t batch_cap();
  // Thread-safe. Sends a reply to the ROUTER peer `routing_id`.
  void reply(std::string routing_id, Frames frames);
  // Thread-safe. The same, for a sender with more replies coming at once (an executor with calls
  // queued): the loop is woken for the first, and the replies made in the next kReplyHold join
  // its next turn, so a burst of calls answered one after another leaves in a few batches
  // instead of waking the loop once each. A reply waits at most kReplyHold.
  void reply_soon(std::string routing_id, Frames frames);
  static constexpr auto kReplyHold = std::chrono::milliseconds(1);
  // Thread-safe. Runs fn on the loop thread.
  void post(std::function<void()> fn);
  // Loop thread only: runs fn every `period`.
  void every(std::chrono::milliseconds period, std::function<void()> fn);
  // Loop thread only: runs fn once, `delay` from now.
  void after(std::chrono::milliseconds delay, std::function<void()> fn);
  // Loop thread only: runs fn at the end of every turn, before what the turn queued is sent (a
  // daemon writes the turn's records there, in one round trip, before any answer leaves).
  void before_sending(std::function<void()> fn) { before_sending_ = std::move(fn); }
  // Loop thread only: runs fn once, at the end of this turn (before before_sending): what a
  // turn's replies free, for one, is used once for all of them.
  void at_turn_end(std::function<void()> fn) { turn_end_.push_back(std::move(fn)); }
  bool in_loop() const { return std::this_thread::get_id() == thread_.get_id(); }
  void stop();
  // The process is ending: requests that fail from now on (its peers may go first) are reported
  // with LocalError::shutdown, as those still pending at stop() are.
  void closing() { closing_ = true; }

  // Blocking helper for threads other than the loop: sends and waits for the reply.
  // Throws ConnectionError on a lost peer, TimeoutError on the deadline.
  std::unique_ptr<InMessage> call(const std::string& peer, OutMessage& msg, uint64_t id,
                                  std::chrono::milliseconds timeout);

  // Counters for tests and status: malformed or unauthenticated messages, refused handshakes.
  uint64_t malformed_count() const { return malformed_.load(); }
  // Thread-safe. Counts and logs (rate-limited) a bad message from `peer` that another listener
  // of this process refused.
  void note_fault(const std::string& peer, const std::string& what);
  // Thread-safe. A ROUTER listening on `host` at a port of its own, with this loop's limits and
  // security (an encrypted listener's handshakes are judged by this loop's ZAP handler), for
  // another thread to own; *address is its "host:port". Throws ConnectionError.
  std::unique_ptr<zmq::socket_t> listener_beside(const std::string& host, std::string* address);
  // Sends `msgs` on `s` (to `routing` on a ROUTER), those that fit together as batches (wire.h),
  // sealed first when `seal` is given; empties msgs.
  static void send_batched(zmq::socket_t& s, const std::string* routing, std::vector<Frames>& msgs,
                           LinkSeal* seal = nullptr, SealedAs as = SealedAs::request);
  // A reply as it may leave: one over the message limit (link_limits.h) becomes an error reply
  // that says why, so the requester hears it instead of losing its connection to the limit.
  static Frames within_limit(Frames reply, const std::string& token);
  // One message waiting at a ROUTER: its routing id and frames (false when none waits).
  static bool receive_routed(zmq::socket_t& router, zmq::message_t& rid, Frames& frames);

  // An encrypted listener's data link (sealed_link.h): a second, plain listener where every
  // message is sealed with `key`, for the parts of large values; nullopt on loopback.
  struct DataLink {
    std::string address, key;
  };
  const std::optional<DataLink>& data_link() const { return data_link_; }
  // Whether a request came in over this loop's data link (its reply goes back there, sealed).
  static bool via_data_link(const std::string& routing_id) {
    return !routing_id.empty() && routing_id[0] == kDataRouting;
  }
  // Loop thread only: the peer name under which requests go sealed to another process's data
  // link (one name per address and key).
  std::string sealed_peer(const DataLink& link);

 private:
  void fail(ReplyCallback& cb, LocalError e);
  static constexpr char kDataRouting = 'd';  // marks the routing ids of data-link requests
  struct Peer {
    std::unique_ptr<zmq::socket_t> dealer;   // a link of its own (a lane, a data link); else null
    std::unique_ptr<zmq::socket_t> monitor;
    std::string rid;       // a shared link's routing id on its ROUTER (SharedLinks), unique per link
    std::string endpoint;  // a shared link's "tcp://host:port", as its monitor's events name it
    int fd = -1;           // a shared link's connection once made (its later events name only that)
    bool connected = false;
    bool curve = false;       // an encrypted link (link_security.h)
    bool handshaken = false;  // its handshake succeeded
    std::unique_ptr<LinkSeal> seal;  // a sealed data link: every message sealed and opened
    std::vector<Frames> outbox;  // requests made this turn, sent by flush()
    BatchWriter batch{batch_cap()};  // and after them, those written straight into a batch
    bool queued() const { return !outbox.empty() || !batch.empty(); }
    size_t inflight = 0;         // requests awaiting a reply: the link is polled while > 0
    Clock::time_point last_used;  // when it last went idle: a link idle for idle_link_ms_ is closed
    Clock::time_point heard;      // its last message, or the request that ended its idleness
    bool probing = false;         // a PING is out to it (probe_silent)
  };
  // A peer that owes replies and has said nothing for a second (or a quarter of the silence
  // limit) is sent a PING, which its I/O loop answers between requests; one silent for the limit
  // (link_limits().silence_ms) is taken for gone (a frozen process or host, a cut network) and its
  // requests fail. Only links with requests in flight are watched: idle links cost nothing,
  // however many there are. (ZeroMQ's ZMTP heartbeats cost every link a timer in libzmq's I/O
  // thread, cancelled by a linear search: a head or driver linked to 10,000 nodes spent its cores
  // on them.) The default limit leaves room for a loop busy with one long turn, such as a new head
  // rebuilding 100,000 actors from Redis (about 12 s here).
  std::atomic<int64_t> silence_ms_{link_limits().silence_ms};
  std::atomic<size_t> max_links_{link_limits().max_links};
  // A connection unused this long (link_limits().idle_link_s) is closed, made again on the next
  // request: a head or a driver that once talked to thousands of nodes does not keep their
  // buffers for ever. Idle links are looked for every kIdleSweep, or every idle time if shorter.
  std::atomic<int64_t> idle_link_ms_{link_limits().idle_link_s * 1000};
  std::chrono::milliseconds idle_sweep() const {
    return std::min<std::chrono::milliseconds>(kIdleSweep, std::chrono::milliseconds(idle_link_ms_.load()));
  }
  static constexpr std::chrono::milliseconds kIdleSweep{5000};  // how often idle links are looked for
  struct Pending {
    std::string peer;
    // Its link: a link with requests in flight is never closed (fail_peer drops them first).
    Peer* link;
    ReplyCallback cb;
    Clock::time_point deadline;
    Landing landing;
  };
  struct Timer {
    std::chrono::milliseconds period;
    Clock::time_point next;
    std::function<void()> fn;
    bool once = false;
  };

  // The ROUTER that a kind of link (plain or encrypted) shares, its monitor, and the maps from
  // what its messages and events name back to the peer.
  struct SharedLinks {
    std::unique_ptr<zmq::socket_t> router, monitor;
    std::unordered_map<std::string, std::string> by_rid;       // routing id -> peer
    std::unordered_map<std::string, std::string> by_endpoint;  // endpoint -> peer
    std::unordered_map<int, std::string> by_fd;                // connection -> peer
  };
  struct LinkEvent {
    uint16_t event;
    uint32_t value;
    std::string endpoint;
  };

  static void tune(zmq::socket_t& s);  // limits and buffers of every socket
  // A ROUTER to listen with: tuned, and a CURVE server judged by zap_ when the loop has one.
  std::unique_ptr<zmq::socket_t> unbound_listener();
  static std::string bound_address(zmq::socket_t& s, const std::string& host);  // its "host:port"
  void run();
  // Waits for any of `items` (sockets or descriptors, POLLIN) at most `timeout`: their revents
  // set, false when a signal interrupted the wait.
  bool wait_for_events(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout);
  std::vector<struct pollfd> pollfds_;  // wait_for_events's, kept between turns
  // How long a turn may wait: until the next timer, the end of a reply hold, or a sweep.
  std::chrono::milliseconds turn_wait(Clock::time_point now) const;
  // The links' sockets found ready by the turn's wait: the shared ROUTERs polled (from
  // `shared_at`), then the links of their own (`addrs`).
  void on_links_ready(const std::vector<zmq::pollitem_t>& items, size_t shared_at, const bool shared_polled[2],
                      const std::vector<std::string>& addrs);
  void run_due_timers(Clock::time_point now);
  // Loop thread only: a request queued for its peer's next batch, and a reply for the requester's.
  void enqueue_request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb,
                       std::chrono::milliseconds timeout, Landing landing);
  // The request's peer, with the request awaited from it (null, its callback failed, when it
  // cannot be reached or `bytes` is over the message limit).
  Peer* enlist(const std::string& peer, uint64_t id, size_t bytes, ReplyCallback& cb,
               std::chrono::milliseconds timeout, Landing& landing);
  static void close_batch(Peer& p);  // the batch written so far joins the outbox, in order
  void mark_dirty(Peer& p, const std::string& peer);  // before queueing: flush() sends it
  // enlist() for each request of a group: the peer, or null when none could be sent.
  Peer* enlist_group(const std::string& peer, size_t bytes, std::vector<std::pair<uint64_t, ReplyCallback>>& calls,
                     std::chrono::milliseconds timeout);
  static void queue_message(Peer& p, OutMessage& m);  // into the peer's batch, or alone
  void queue_frames(Peer& p, const std::string& peer, Frames frames);  // after the batch written so far
  static size_t largest_frame(const Frames& frames);
  void queue_reply(std::string routing_id, Frames frames);
  void hand_over_reply(std::string routing_id, Frames frames, bool soon);
  void drain_posted();
  void wake_loop();  // writes the wake fd: the loop's poll returns
  Peer& peer(const std::string& addr);
  // The links (io_loop_links.cc): one of its own, or one on the shared ROUTER of its kind.
  void link_own(const std::string& addr, Peer& p, std::string target);
  void link_shared(const std::string& addr, Peer& p, const std::string& target);
  SharedLinks& shared_for(const Peer& p) { return shared_[p.curve ? 1 : 0]; }
  void on_shared_readable(SharedLinks& s);
  // What a shared monitor said: applied to its links (`idle_only`: only to links with nothing in
  // flight, whose failing calls no callback; the rest wait for the turn's own reading).
  void on_shared_monitor(SharedLinks& s, bool idle_only = false);
  void apply_link_event(SharedLinks& s, const LinkEvent& e);
  // One monitor event for a link, either kind: marks it connected or handshaken, or fails it
  // (true: the Peer is gone). `refusal`: the event that means its connection was refused.
  bool on_link_event(const std::string& addr, Peer& p, uint16_t event, uint16_t refusal);
  // The link an event of a shared monitor is about (peers_.end() for a closed link's): a
  // connection being made is named by its endpoint, one made by its descriptor.
  std::map<std::string, Peer>::iterator link_of(SharedLinks& s, const LinkEvent& e);
  void unlink(const std::string& addr, Peer& p);  // a link's connection closed (its Peer stays)
  void on_router_readable();
  void take_request(const std::string& routing, const std::string& from, Received received);
  void on_dealer_readable(const std::string& addr, Peer& p);
  void take_replies(const std::string& addr, Frames frames);  // a message of replies (one, or a batch)
  void take_reply(const std::string& addr, Received received);
  void take_group(const std::string& addr, std::unique_ptr<InMessage> group);  // taskReplies
  // Runs a reply callback; one that throws is logged (the loop and its process keep running).
  static void deliver(ReplyCallback& cb, std::unique_ptr<InMessage> msg, std::optional<LocalError> err);
  // Sends what this turn queued: each peer's requests, then the replies, batched per peer.
  void flush();
  void on_monitor_readable(const std::string& addr, Peer& p);
  // A listener's monitor (the router's or the data link's): counts and limits connections.
  void on_router_monitor_readable(zmq::socket_t& monitor);
  // The data link (io_loop_data.cc): listening, its requests, and replies opened from a peer's.
  void listen_for_data(const std::string& host);
  void on_data_readable();
  bool open_replies(const std::string& addr, Peer& p, Frames& frames);
  // The first frame over the message limit, as an error to report; nullopt when all are within.
  static std::optional<std::string> oversized(const Frames& frames, const std::string& to);
  static std::optional<std::string> oversized(size_t frame_bytes, const std::string& to);  // its largest frame's
  // Logs a fault of a peer at a bounded rate, and counts it.
  void fault(const std::string& peer, const std::string& what);
  const CurveKeys& keys();
  // Fails every request to addr: code UNAVAILABLE when it never connected (nothing was
  // delivered), WORKER_CRASHED when an established connection was lost.
  void fail_peer(const std::string& addr, const std::string& why,
                 wire::ErrorCode code = wire::ErrorCode::WORKER_CRASHED);
  void expire(Clock::time_point now);
  void close_idle(Clock::time_point now);
  // At link_limits().max_links: closes the least recently used quarter of the idle links.
  void close_least_used();
  using PeerMap = std::map<std::string, Peer>;
  PeerMap::iterator close_link(PeerMap::iterator it);  // an idle link closed (made again on use)
  // Loop thread: PINGs the silent peers that owe replies, and fails those silent too long.
  void probe_silent(Clock::time_point now);
  // One request to `addr` answered or given up: a link with none left is no longer polled.
  void settle(const Pending& p);
  // A request answered: out of pending_ and settled; its callback, to run.
  ReplyCallback answered(std::unordered_map<uint64_t, Pending>::iterator it);

  std::shared_ptr<zmq::context_t> ctx_;  // declared first: the sockets go before it
  std::string inproc_;                     // this loop's prefix for its monitors' endpoints
  std::string token_;
  RequestHandler handler_;
  std::unique_ptr<zmq::socket_t> router_;
  std::string address_;
  int wake_fd_ = -1;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> running_{true};
  std::atomic<bool> closing_{false};
  std::atomic<uint64_t> malformed_{0};
  uint64_t monitor_seq_ = 0;
  uint64_t link_seq_ = 0;                          // numbers the shared links' routing ids
  SharedLinks shared_[2];                         // plain and encrypted links, made on first use
  std::vector<std::pair<SharedLinks*, LinkEvent>> held_events_;  // shared monitors' events for busy links
  std::optional<CurveKeys> keys_;                 // made when the first encrypted link needs them
  std::unique_ptr<zmq::socket_t> zap_;            // the ZAP handler of an encrypted listener
  std::unique_ptr<zmq::socket_t> router_monitor_; // its connections and refused handshakes
  std::optional<DataLink> data_link_;             // an encrypted listener's data link
  std::unique_ptr<zmq::socket_t> data_router_, data_monitor_;
  std::unique_ptr<LinkSeal> data_seal_;
  std::unordered_map<std::string, DataLink> sealed_links_;  // sealed peer name -> its data link
  ConnectionCount connections_{link_limits()};    // loop thread only
  PeerFaults faults_;                             // loop thread only

  std::mutex mu_;
  std::vector<std::function<void()>> posted_;  // guarded by mu_
  std::vector<std::pair<std::string, Frames>> posted_replies_;  // guarded by mu_: replies from other threads
  bool wake_pending_ = false;     // guarded by mu_: the wake fd was written since the last drain
  bool holding_replies_ = false;  // guarded by mu_: replies posted without a wake, taken by hold_until_
  Clock::time_point hold_until_ = Clock::time_point::max();  // loop thread only

  // Loop thread only.
  PeerMap peers_;
  // The peer of the last request (a value of peers_), forgotten when a peer is removed.
  std::string last_peer_addr_;
  Peer* last_peer_ = nullptr;
  // The links with requests in flight, the only ones polled: a process that has talked to
  // thousands of peers (a head, a driver of many actors) pays per turn only for the busy ones.
  std::set<std::string> active_;
  std::vector<std::string> dirty_peers_;                     // peers with a non-empty outbox
  std::vector<std::pair<std::string, Frames>> router_out_;  // replies made this turn
  std::unordered_map<uint64_t, Pending> pending_;
  // Answered requests' map nodes, reused by the next requests (a request allocates no node).
  static constexpr size_t kSparePending = 4096;
  std::vector<std::unordered_map<uint64_t, Pending>::node_type> spare_pending_;
  std::vector<Timer> timers_;
  std::function<void()> before_sending_;
  std::vector<std::function<void()>> turn_end_;  // loop thread only
  Clock::time_point next_expiry_scan_{};
  Clock::time_point next_idle_sweep_{};
  Clock::time_point next_probe_scan_{};

  std::thread thread_;
};

}  // namespace yard::detail
