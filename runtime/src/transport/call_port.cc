#include "call_port.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <kj/exception.h>

namespace yard::detail {

namespace {
// What ZMQ_EVENTS says of a socket: whether a message waits (asking also takes the commands that
// made its descriptor readable: see Poller::wait in framing.cc).
bool readable(zmq::socket_t& s) { return (s.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }
}  // namespace

CallPort::CallPort(IoLoop& io, const std::string& host) : io_(io), held_(io.token(), batch_cap()) {
  socket_ = io.listener_beside(host, &address_);
  socket_fd_ = socket_->get(zmq::sockopt::fd);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  watcher_ = std::thread([this] { watch(); });
}

CallPort::~CallPort() {
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    closing_ = true;
  }
  watch_cv_.notify_all();
  watcher_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void CallPort::wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

bool CallPort::next(IoLoop::Incoming& out, bool wait) {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (!calls_.empty()) {
      out = std::move(calls_.front());
      calls_.pop_front();
      return true;
    }
    if (take_waiting()) continue;
    if (!wait) return false;
    // Nothing waits: sleep on the socket's descriptor and the wake descriptor.
    pollfd fds[2] = {{socket_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (readable(*socket_)) continue;
    int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno != EINTR) throw zmq::error_t();
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
      if (calls_.empty() && !readable(*socket_)) return false;
    }
  }
}

wire::Envelope::Builder CallPort::group_reply(const Incoming& call) {
  if (held_.must_leave_for(call.routing_id)) flush();
  return held_.add(call.routing_id, call.request_id());
}

void CallPort::replied(bool more) {
  if (held_.must_leave_after(more)) flush();
}

void CallPort::reply(const Incoming& call, OutMessage& m, bool) {
  flush();
  auto frames = within_limit(m.finish(), io_.token());
  std::lock_guard<std::mutex> l(mu_);
  send(call.routing_id, frames);
}

void CallPort::flush() {
  if (held_.empty()) return;
  auto [to, group] = held_.take();
  std::lock_guard<std::mutex> l(mu_);
  socket_->send(zmq::buffer(to), zmq::send_flags::sndmore);
  socket_->send(group, zmq::send_flags::none);
}

void CallPort::call_begins() { in_call_.store(true, std::memory_order_relaxed); }

void CallPort::call_ends() { in_call_.store(false, std::memory_order_relaxed); }

void CallPort::send(const std::string& routing, Frames& frames) {
  socket_->send(zmq::buffer(routing), zmq::send_flags::sndmore);
  for (size_t k = 0; k < frames.size(); ++k)
    socket_->send(frames[k], k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

void CallPort::refuse(const std::string& routing, uint64_t request_id, wire::ErrorCode code, const std::string& why,
                      bool with_token) {
  // Answers to peers that did not show the token carry no token either.
  OutMessage out(with_token ? io_.token() : std::string(), request_id, true);
  set_error(out.env(), code, why);
  auto frames = out.finish();
  send(routing, frames);
}

bool CallPort::take_waiting() {
  bool took = false;
  for (int budget = 0; budget < 4096; ++budget) {
    zmq::message_t rid;
    Frames frames;
    if (!receive_routed(*socket_, rid, frames)) break;
    took = true;
    std::string routing(static_cast<const char*>(rid.data()), rid.size());
    std::string from = frames.empty() ? std::string("unknown") : frame_peer_address(frames[0]);
    std::vector<Received> msgs;
    try {
      msgs = received_of(frames);
    } catch (const DecodeError& e) {
      io_.note_fault(from, "dropped a malformed batch on " + address_ + ": " + e.what());
      refuse(routing, 0, wire::ErrorCode::BAD_REQUEST, e.what(), false);
      continue;
    }
    for (auto& r : msgs) {
      std::unique_ptr<InMessage> msg;
      try {
        msg = std::move(r).open();
      } catch (const DecodeError& e) {
        io_.note_fault(from, "dropped a malformed message on " + address_ + ": " + e.what());
        refuse(routing, 0, wire::ErrorCode::BAD_REQUEST, e.what(), false);
        continue;
      }
      uint64_t id = msg->env().getRequestId();
      if (msg->token() != io_.token()) {
        io_.note_fault(from, "refused a request on " + address_ + " with a " +
                                 (msg->token().size() == 0 ? "missing" : "wrong") + " cluster token");
        refuse(routing, id, wire::ErrorCode::UNAUTHENTICATED,
               msg->token().size() == 0 ? "missing cluster token" : "wrong cluster token", false);
        continue;
      }
      if (stopping_.load(std::memory_order_relaxed)) continue;  // stopped: as good as gone
      auto body = msg->env().getBody();
      if (body.isPing()) {  // a liveness probe: answered here, even while a call runs
        OutMessage out(io_.token(), id, true);
        out.env().getBody().setOk();
        auto f = out.finish();
        send(routing, f);
        continue;
      }
      queue_calls(routing, from, std::move(msg));
    }
  }
  return took;
}

void CallPort::queue_calls(const std::string& routing, const std::string& from, std::unique_ptr<InMessage> msg) {
  uint64_t id = msg->env().getRequestId();
  std::shared_ptr<InMessage> shared = std::move(msg);
  auto refuse_call = [&](uint64_t request_id) {
    io_.note_fault(from, "refused a request on the call port " + address_ + " that is not an actor call");
    refuse(routing, request_id, wire::ErrorCode::BAD_REQUEST, "a call port answers only actor calls", true);
  };
  try {
    auto body = shared->env().getBody();
    if (body.isPushTask()) {
      if (!body.getPushTask().hasActorId()) return refuse_call(id);
      calls_.push_back(IoLoop::Incoming{routing, shared, this, -1, {}});
      return;
    }
    if (!body.isPushTasks() || body.getPushTasks().size() == 0) return refuse_call(id);
    auto list = body.getPushTasks();
    for (unsigned i = 0; i < list.size(); ++i) {
      if (list[i].hasActorId())
        calls_.push_back(IoLoop::Incoming{routing, shared, this, static_cast<int32_t>(i), list[i]});
      else
        refuse_call(list[i].getRequestId());
    }
  } catch (const kj::Exception& e) {
    io_.note_fault(from, "dropped a malformed message on " + address_ + ": " + e.getDescription().cStr());
    refuse(routing, id, wire::ErrorCode::BAD_REQUEST, "malformed calls", true);
  }
}

void CallPort::watch() {
  std::unique_lock<std::mutex> w(watch_mu_);
  while (!closing_) {
    watch_cv_.wait_for(w, kWatchTick);
    if (closing_ || !in_call_.load(std::memory_order_relaxed)) continue;
    // The executor runs a call: the socket is free unless it is just taking it back.
    std::unique_lock<std::mutex> l(mu_, std::try_to_lock);
    if (l.owns_lock() && in_call_.load(std::memory_order_relaxed)) take_waiting();
  }
}

}  // namespace yard::detail
