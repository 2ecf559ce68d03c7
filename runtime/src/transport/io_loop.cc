#include "io_loop.h"

#include <future>

#include "yard/errors.h"

namespace yard::detail {

namespace {
std::string inproc_name(const void* loop) {
  char self[32];
  std::snprintf(self, sizeof self, "%p", loop);
  return std::string("inproc://yard-") + self;  // unique within a shared context
}
}  // namespace

IoLoop::IoLoop(const std::string& host, int port, std::string token, RequestHandler handler,
               std::shared_ptr<zmq::context_t> shared)
    // An encrypted listener has a context of its own (its ZAP handler is the context's) with a
    // second ZeroMQ I/O thread: CURVE encrypts and decrypts on the I/O threads, and a large
    // transfer over two connections (lanes) then uses two cores.
    : ctx_(shared && !curve_for_host(host) ? std::move(shared) : make_io_context(curve_for_host(host) ? 2 : 1)),
      inproc_(inproc_name(this)),
      token_(std::move(token)),
      identity_(token_),
      listener_(*ctx_, inproc_, host, port, token_, identity_, faults_, std::move(handler)),
      requests_(links_, faults_, token_),
      links_(*ctx_, inproc_, identity_, listener_.connections(), faults_, requests_) {
  thread_ = std::thread([this] { run(); });
}

IoLoop::~IoLoop() { stop(); }

void IoLoop::stop() {
  if (!running_.exchange(false)) {
    if (thread_.joinable() && !in_loop()) thread_.join();
    return;
  }
  post_box_.wake();
  if (thread_.joinable()) {
    if (in_loop())
      thread_.detach();
    else
      thread_.join();
  }
}

void IoLoop::note_fault(const std::string& peer, const std::string& what) {
  post([this, peer, what] { faults_.note(peer, what); });
}

size_t IoLoop::link_count() {
  if (in_loop()) return links_.count();
  auto n = std::make_shared<std::promise<size_t>>();
  auto fut = n->get_future();
  post([this, n] { n->set_value(links_.count()); });
  return fut.get();
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

void IoLoop::run() {
  while (running_.load(std::memory_order_relaxed)) turn();
  requests_.fail_all("runtime is shutting down");
}

void IoLoop::turn() {
  timers_.end_turn();
  links_.flush();
  listener_.flush();
  items_.clear();
  items_.push_back({nullptr, post_box_.fd(), ZMQ_POLLIN, 0});
  size_t listener_at = listener_.add_items(items_);
  LinkPoll links = links_.add_items(items_);
  if (!poller_.wait(items_, turn_wait(Clock::now()))) return;
  if (items_[0].revents & ZMQ_POLLIN) post_box_.clear_wake();
  drain_posted();
  listener_.on_ready(items_, listener_at);
  links_.on_ready(items_, links);
  auto now = Clock::now();
  timers_.run_due(now);
  links_.close_idle(now);
  probe_silent(now);
  requests_.expire(now);
}

std::chrono::milliseconds IoLoop::turn_wait(Clock::time_point now) const {
  // An idle loop (nothing in flight to expire) sleeps until woken or a timer is due; one with
  // links wakes every idle_sweep() to close those idle too long. Thousands of idle loops in one
  // process (simulated nodes, which only answer) cost nothing.
  auto wait = requests_.empty()
                  ? (links_.count() == 0 ? std::chrono::milliseconds(std::chrono::hours(1)) : links_.idle_sweep())
                  : std::chrono::milliseconds(100);
  wait = timers_.wait_until_due(now, wait);
  if (post_box_.hold_until() != Clock::time_point::max()) wait = std::min(wait, until(now, post_box_.hold_until()));
  return wait;
}

void IoLoop::drain_posted() {
  auto drained = post_box_.drain();
  for (auto& fn : drained.work) fn();
  for (auto& [rid, frames] : drained.replies) listener_.queue_reply(std::move(rid), std::move(frames));
}

void IoLoop::probe_silent(Clock::time_point now) {
  auto silent = links_.silent(now);
  for (auto& addr : silent.gone)
    requests_.on_link_failed(addr,
                             addr + " has not answered for " + std::to_string(links_.silence_limit().count()) +
                                 " ms, a PING included (its process or host is stopped, or the network to it is cut)",
                             wire::ErrorCode::WORKER_CRASHED);
  for (auto& addr : silent.ask) {
    uint64_t id = next_request_id();
    OutMessage m(token_, id, false);
    m.env().getBody().setPing();
    enqueue_request(addr, id, m.finish(), [this, addr](std::unique_ptr<InMessage>, std::optional<LocalError>) {
      links_.probe_answered(addr);
    }, std::chrono::milliseconds::max(), {});
  }
}

}  // namespace yard::detail
