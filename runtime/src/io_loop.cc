#include "io_loop.h"

#include <sys/resource.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <limits>

#include <spdlog/spdlog.h>

#include "yard/errors.h"

namespace yard::detail {

std::string frame_peer_address(zmq::message_t& m) {
  const char* a = zmq_msg_gets(m.handle(), "Peer-Address");
  return a ? a : "unknown";
}

void IoLoop::tune(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(link_limits().max_message_bytes));
}

std::shared_ptr<zmq::context_t> IoLoop::make_context(int io_threads) {
  auto ctx = std::make_shared<zmq::context_t>(io_threads);
  // ZeroMQ's default of 1,024 sockets per context would cap a process of many loops (simulated
  // nodes, several sockets each) at a few hundred: allow as many as it may open descriptors.
  rlimit fds{};
  if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur > 1024)
    ctx->set(zmq::ctxopt::max_sockets, static_cast<int>(std::min<rlim_t>(fds.rlim_cur, 1 << 20)));
  return ctx;
}

IoLoop::IoLoop(const std::string& host, int port, std::string token, RequestHandler handler,
               std::shared_ptr<zmq::context_t> shared)
    // An encrypted listener has a context of its own (its ZAP handler is the context's) with a
    // second ZeroMQ I/O thread: CURVE encrypts and decrypts on the I/O threads, and a large
    // transfer over two connections (lanes) then uses two cores.
    : ctx_(shared && !curve_for_host(host) ? std::move(shared) : make_context(curve_for_host(host) ? 2 : 1)),
      token_(std::move(token)),
      handler_(std::move(handler)) {
  char self[32];
  std::snprintf(self, sizeof self, "%p", static_cast<void*>(this));
  inproc_ = std::string("inproc://yard-") + self;  // unique within a shared context
  if (curve_for_host(host)) {
    // Listening beyond loopback: CURVE, admitting only holders of the cluster's key. The ZAP
    // handler is bound before any handshake can happen.
    zap_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::rep);
    zap_->set(zmq::sockopt::linger, 0);
    zap_->bind("inproc://zeromq.zap.01");
  }
  router_ = unbound_listener();
  // Connections are counted per peer as they are accepted (link_limits.h); refused handshakes of
  // an encrypted listener are reported.
  if (zmq_socket_monitor(router_->handle(), (inproc_ + "-router-monitor").c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    throw zmq::error_t();
  router_monitor_ = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pair);
  router_monitor_->set(zmq::sockopt::linger, 0);
  router_monitor_->connect(inproc_ + "-router-monitor");
  std::string ep = "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
  try {
    router_->bind(ep);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE)
      throw ConnectionError("cannot listen on " + host + ":" + std::to_string(port) +
                            ": the port is already in use");
    throw ConnectionError("cannot listen on " + host + ":" + std::to_string(port) + ": " + e.what());
  }
  address_ = bound_address(*router_, host);
  if (curve_for_host(host)) listen_for_data(host);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { run(); });
}

std::unique_ptr<zmq::socket_t> IoLoop::unbound_listener() {
  auto s = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
  tune(*s);
  s->set(zmq::sockopt::router_mandatory, 0);
  if (zap_) {
    s->set(zmq::sockopt::curve_server, 1);
    s->set(zmq::sockopt::curve_secretkey, keys().secret_z85);
    s->set(zmq::sockopt::zap_domain, "yard");
  }
  return s;
}

std::string IoLoop::bound_address(zmq::socket_t& s, const std::string& host) {
  std::string last = s.get(zmq::sockopt::last_endpoint);  // tcp://127.0.0.1:12345
  return host + ":" + last.substr(last.rfind(':') + 1);
}

std::unique_ptr<zmq::socket_t> IoLoop::listener_beside(const std::string& host, std::string* address) {
  auto s = unbound_listener();
  try {
    s->bind("tcp://" + host + ":*");
  } catch (const zmq::error_t& e) {
    throw ConnectionError("cannot listen on " + host + ": " + e.what());
  }
  *address = bound_address(*s, host);
  return s;
}

void IoLoop::note_fault(const std::string& peer, const std::string& what) {
  post([this, peer, what] { fault(peer, what); });
}

IoLoop::~IoLoop() {
  stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void IoLoop::stop() {
  if (!running_.exchange(false)) {
    if (thread_.joinable() && !in_loop()) thread_.join();
    return;
  }
  wake_loop();
  if (thread_.joinable()) {
    if (in_loop())
      thread_.detach();
    else
      thread_.join();
  }
}

void IoLoop::post(std::function<void()> fn) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = !wake_pending_;
    wake_pending_ = true;
    posted_.push_back(std::move(fn));
  }
  if (wake) wake_loop();
}

void IoLoop::wake_loop() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void IoLoop::every(std::chrono::milliseconds period, std::function<void()> fn) {
  timers_.push_back(Timer{period, Clock::now() + period, std::move(fn)});
}

void IoLoop::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  timers_.push_back(Timer{delay, Clock::now() + delay, std::move(fn), true});
}

std::unique_ptr<InMessage> IoLoop::call(const std::string& peer_addr, OutMessage& msg, uint64_t id,
                                        std::chrono::milliseconds timeout) {
  auto prom = std::make_shared<std::promise<std::pair<std::unique_ptr<InMessage>, std::optional<LocalError>>>>();
  auto fut = prom->get_future();
  request(peer_addr, id, msg.finish(),
          [prom](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
            prom->set_value({std::move(r), std::move(e)});
          },
          timeout);
  auto res = fut.get();
  if (res.second) {
    if (res.second->code == wire::ErrorCode::TIMEOUT) throw TimeoutError(res.second->message);
    throw ConnectionError(res.second->message);
  }
  return std::move(res.first);
}

void IoLoop::drain_posted() {
  std::vector<std::function<void()>> work;
  std::vector<std::pair<std::string, Frames>> replies;
  {
    std::lock_guard<std::mutex> l(mu_);
    work.swap(posted_);
    replies.swap(posted_replies_);
    wake_pending_ = false;
    // Replies held without a wake (reply_soon) are taken again at hold_until_; once a turn then
    // finds none, the next one wakes the loop.
    if (holding_replies_) {
      auto now = Clock::now();
      if (hold_until_ == Clock::time_point::max()) {
        hold_until_ = now + kReplyHold;
      } else if (now >= hold_until_) {
        holding_replies_ = !replies.empty();
        hold_until_ = holding_replies_ ? now + kReplyHold : Clock::time_point::max();
      }
    }
  }
  for (auto& fn : work) fn();
  for (auto& [rid, frames] : replies) queue_reply(std::move(rid), std::move(frames));
}

void IoLoop::run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::string> addrs;
  while (running_.load(std::memory_order_relaxed)) {
    while (!turn_end_.empty()) {  // (one may queue another)
      auto due = std::move(turn_end_);
      turn_end_.clear();
      for (auto& fn : due) fn();
    }
    if (before_sending_) before_sending_();
    flush();
    items.clear();
    addrs.clear();
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    items.push_back({router_->handle(), 0, ZMQ_POLLIN, 0});
    for (auto& addr : active_) {
      auto& p = peers_.at(addr);
      if (!p.dealer) continue;  // a shared link: its ROUTER is polled below
      addrs.push_back(addr);
      items.push_back({p.dealer->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({p.monitor->handle(), 0, ZMQ_POLLIN, 0});
    }
    size_t shared_at = items.size();
    bool shared_polled[2] = {false, false};  // a shared ROUTER made during the turn waits for the next
    for (int k = 0; k < 2; ++k)
      if (shared_[k].router) {
        shared_polled[k] = true;
        items.push_back({shared_[k].router->handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({shared_[k].monitor->handle(), 0, ZMQ_POLLIN, 0});
      }
    size_t monitor_at = items.size();
    items.push_back({router_monitor_->handle(), 0, ZMQ_POLLIN, 0});
    if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
    size_t data_at = items.size();
    if (data_router_) {
      items.push_back({data_router_->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({data_monitor_->handle(), 0, ZMQ_POLLIN, 0});
    }
    if (!wait_for_events(items, turn_wait(Clock::now()))) continue;
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    drain_posted();
    if (items[monitor_at].revents & ZMQ_POLLIN) on_router_monitor_readable(*router_monitor_);
    if (zap_ && (items[monitor_at + 1].revents & ZMQ_POLLIN))
      answer_zap(*zap_, keys().public_z85, [this](const std::string& peer, const std::string& why) {
        fault(peer, "refused a connection to " + address_ + ": " + why);
      });
    if (items[1].revents & ZMQ_POLLIN) on_router_readable();
    if (data_router_) {
      if (items[data_at + 1].revents & ZMQ_POLLIN) on_router_monitor_readable(*data_monitor_);
      if (items[data_at].revents & ZMQ_POLLIN) on_data_readable();
    }
    on_links_ready(items, shared_at, shared_polled, addrs);
    auto now = Clock::now();
    run_due_timers(now);
    expire(now);
  }
  // Fail whatever is still waiting so no caller hangs on a stopped loop.
  auto pending = std::move(pending_);
  pending_.clear();
  closing_ = true;
  for (auto& [id, p] : pending) fail(p.cb, LocalError{wire::ErrorCode::UNAVAILABLE, "runtime is shutting down"});
}

std::chrono::milliseconds IoLoop::turn_wait(Clock::time_point now) const {
  // Rounded up: a timer due in under a millisecond is waited for, not spun on with zero timeouts.
  // An idle loop (nothing in flight to expire) sleeps until woken or a timer is due; one with
  // links wakes every idle_sweep() to close those idle too long. Thousands of idle loops in one
  // process (simulated nodes, which only answer) cost nothing.
  auto wait = pending_.empty() ? (peers_.empty() ? std::chrono::milliseconds(std::chrono::hours(1)) : idle_sweep())
                               : std::chrono::milliseconds(100);
  auto until = [&](Clock::time_point t) {
    return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(t - now));
  };
  for (auto& t : timers_) wait = std::min(wait, until(t.next));
  if (hold_until_ != Clock::time_point::max()) wait = std::min(wait, until(hold_until_));
  return wait;
}

void IoLoop::on_links_ready(const std::vector<zmq::pollitem_t>& items, size_t shared_at, const bool shared_polled[2],
                            const std::vector<std::string>& addrs) {
  for (size_t i = shared_at, k = 0; k < 2; ++k) {
    if (!shared_polled[k]) continue;
    if (items[i].revents & ZMQ_POLLIN) on_shared_readable(shared_[k]);
    if ((items[i + 1].revents & ZMQ_POLLIN) || !held_events_.empty()) on_shared_monitor(shared_[k]);
    i += 2;
  }
  for (size_t i = 0; i < addrs.size(); ++i) {  // links of their own: items 2 + 2i (DEALER), 3 + 2i (monitor)
    auto it = peers_.find(addrs[i]);
    if (it == peers_.end()) continue;
    if (items[2 + 2 * i].revents & ZMQ_POLLIN) on_dealer_readable(addrs[i], it->second);
    it = peers_.find(addrs[i]);
    if (it == peers_.end()) continue;
    if (items[3 + 2 * i].revents & ZMQ_POLLIN) on_monitor_readable(addrs[i], it->second);
  }
}

void IoLoop::run_due_timers(Clock::time_point now) {
  for (size_t i = 0; i < timers_.size();) {
    if (timers_[i].next <= now) {
      timers_[i].next = now + timers_[i].period;
      auto fn = timers_[i].fn;  // the timer may add timers
      if (timers_[i].once) {
        timers_.erase(timers_.begin() + static_cast<long>(i));
        fn();
        continue;
      }
      fn();
    }
    ++i;
  }
}

// What zmq_poll does, with fewer system calls: a ZeroMQ socket's descriptor (ZMQ_FD) becomes
// readable when commands reach the socket, and asking ZMQ_EVENTS takes them, so events already
// there are found by asking each socket first, and only when none has any does the loop block on
// the descriptors; then only the sockets whose descriptor woke are asked again (zmq_poll polls
// once more without waiting first, and asks every socket after each poll: each ask is a poll and
// a getpid of its own inside libzmq). A plain descriptor (the wake fd) found ready while a socket
// already was is taken on the next turn (posted work is drained every turn regardless).
bool IoLoop::wait_for_events(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
  auto ready = [](zmq::pollitem_t& it) {
    uint32_t events = 0;
    size_t size = sizeof events;
    if (zmq_getsockopt(it.socket, ZMQ_EVENTS, &events, &size) != 0) throw zmq::error_t();
    it.revents = static_cast<short>(events & static_cast<uint32_t>(it.events));
    return it.revents != 0;
  };
  bool any = false;
  for (auto& it : items) {
    it.revents = 0;
    if (it.socket) any = ready(it) || any;
  }
  if (any) return true;
  pollfds_.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    pollfds_[i] = {items[i].fd, POLLIN, 0};
    if (items[i].socket) {
      size_t size = sizeof pollfds_[i].fd;
      if (zmq_getsockopt(items[i].socket, ZMQ_FD, &pollfds_[i].fd, &size) != 0) throw zmq::error_t();
    }
  }
  int rc = ::poll(pollfds_.data(), pollfds_.size(), timeout.count() > std::numeric_limits<int>::max()
                                                        ? -1 : static_cast<int>(timeout.count()));
  if (rc < 0) {
    if (errno == EINTR) return false;
    throw zmq::error_t();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (!(pollfds_[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
    if (items[i].socket)
      ready(items[i]);
    else
      items[i].revents = ZMQ_POLLIN;
  }
  return true;
}

bool IoLoop::receive_routed(zmq::socket_t& router, zmq::message_t& rid, Frames& frames) {
  if (!router.recv(rid, zmq::recv_flags::dontwait)) return false;
  bool more = rid.more();
  while (more) {
    zmq::message_t m;
    (void)router.recv(m, zmq::recv_flags::none);
    more = m.more();
    frames.push_back(std::move(m));
  }
  return true;
}

void IoLoop::on_router_readable() {
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*router_, rid, frames)) return;
    std::string routing(static_cast<const char*>(rid.data()), rid.size());
    std::string from = frames.empty() ? std::string("unknown") : frame_peer_address(frames[0]);
    if (via_data_link(routing)) {
      // ZeroMQ's own routing ids begin with a zero byte; this one was chosen by the peer, and
      // would be taken for the data link's: nothing it sends is read.
      fault(from, "dropped a message on " + address_ + " from a peer that chose its own routing id");
      continue;
    }
    std::vector<Received> msgs;
    try {
      msgs = received_of(frames);
    } catch (const DecodeError& e) {
      fault(from, std::string("dropped a malformed batch on ") + address_ + ": " + e.what());
      OutMessage out("", 0, true);
      set_error(out.env(), wire::ErrorCode::BAD_REQUEST, e.what());
      router_out_.emplace_back(routing, out.finish());
      continue;
    }
    for (auto& m : msgs) take_request(routing, from, std::move(m));
  }
}

void IoLoop::take_request(const std::string& routing, const std::string& from, Received received) {
  // An error answered here. Answers to peers that did not show the token carry no token either.
  auto refuse = [&](const std::string& token, uint64_t id, wire::ErrorCode code, const std::string& why) {
    OutMessage out(token, id, true);
    set_error(out.env(), code, why);
    router_out_.emplace_back(routing, out.finish());
  };
  std::unique_ptr<InMessage> msg;
  try {
    msg = std::move(received).open();
  } catch (const DecodeError& e) {
    fault(from, std::string("dropped a malformed message on ") + address_ + ": " + e.what());
    return refuse("", 0, wire::ErrorCode::BAD_REQUEST, e.what());
  }
  uint64_t id = msg->env().getRequestId();
  if (msg->token() != token_) {
    bool missing = msg->token().size() == 0;
    fault(from, "refused a request on " + address_ + " with a " + (missing ? "missing" : "wrong") + " cluster token");
    return refuse("", id, wire::ErrorCode::UNAUTHENTICATED, missing ? "missing cluster token" : "wrong cluster token");
  }
  if (msg->env().getBody().isPing() && !via_data_link(routing)) {  // a liveness probe: answered here
    OutMessage out(token_, id, true);
    out.env().getBody().setOk();
    router_out_.emplace_back(routing, out.finish());
    return;
  }
  if (via_data_link(routing) && !msg->env().getBody().isGetObjectPart()) {
    fault(from, "refused a request on the data link of " + address_ + " that is not for an object's part");
    return refuse(token_, id, wire::ErrorCode::BAD_REQUEST, "a data link answers only requests for parts of objects");
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
    fault(from, "dropped a malformed message on " + address_ + ": " + e.getDescription().cStr());
    return refuse(token_, id, wire::ErrorCode::BAD_REQUEST, "malformed calls");
  }
  auto handle = [&](int32_t call) {
    try {
      handler_(Incoming{routing, shared, false, call, call < 0 ? wire::PushTask::Reader() : list[unsigned(call)]});
    } catch (const std::exception& e) {
      spdlog::error("request handler failed: {}", e.what());
    } catch (const kj::Exception& e) {
      spdlog::error("request handler failed: {}", e.getDescription().cStr());
    }
  };
  if (calls < 0) return handle(-1);
  if (calls == 0) refuse(token_, id, wire::ErrorCode::BAD_REQUEST, "an empty list of calls");
  for (int32_t i = 0; i < calls; ++i) handle(i);
}

wire::PushTask::Reader IoLoop::Incoming::push_task() const {
  return call < 0 ? msg->env().getBody().getPushTask() : call_reader;
}

uint64_t IoLoop::Incoming::request_id() const { return call < 0 ? msg->env().getRequestId() : push_task().getRequestId(); }

void IoLoop::on_dealer_readable(const std::string& addr, Peer& p) {
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
    if (p.seal && !open_replies(addr, p, frames)) return;  // the link was failed
    take_replies(addr, std::move(frames));
  }
}

std::optional<std::string> IoLoop::oversized(const Frames& frames, const std::string& to) {
  return oversized(largest_frame(frames), to);
}

std::optional<std::string> IoLoop::oversized(size_t frame_bytes, const std::string& to) {
  auto limit = static_cast<size_t>(link_limits().max_message_bytes);
  if (frame_bytes <= limit) return std::nullopt;
  return "a message of " + std::to_string(frame_bytes) + " bytes to " + to + " is over the limit of " +
         std::to_string(limit) + " bytes (YARD_MAX_MESSAGE_BYTES); pass a value that large with yard::put";
}

void IoLoop::fault(const std::string& peer, const std::string& what) {
  malformed_.fetch_add(1);
  auto line = faults_.note(peer, what, Clock::now());
  if (line) spdlog::warn("{}", *line);
}

const CurveKeys& IoLoop::keys() {
  if (!keys_) keys_ = curve_keys_for(token_);
  return *keys_;
}

void IoLoop::fail(ReplyCallback& cb, LocalError e) {
  e.shutdown = e.shutdown || closing_;
  deliver(cb, nullptr, std::move(e));
}

void IoLoop::expire(Clock::time_point now) {
  close_idle(now);
  probe_silent(now);
  if (now < next_expiry_scan_) return;
  next_expiry_scan_ = now + std::chrono::milliseconds(20);
  std::vector<std::pair<ReplyCallback, std::string>> expired;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline <= now) {
      settle(it->second);
      expired.emplace_back(std::move(it->second.cb), it->second.peer);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [cb, peer] : expired)
    fail(cb, LocalError{wire::ErrorCode::TIMEOUT, "no reply from " + peer + " before the deadline"});
}

}  // namespace yard::detail
