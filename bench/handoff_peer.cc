#include "handoff_peer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

namespace bench {

namespace {

using Clock = std::chrono::steady_clock;
using Item = std::pair<std::string, std::string>;  // (routing id, payload)

// Work handed to a loop thread: a locked queue and one eventfd wake per batch.
class Posted {
 public:
  Posted() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Posted() { close(fd_); }
  int fd() const { return fd_; }
  void post(Item item) {
    bool wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      wake = !pending_;
      pending_ = true;
      items_.push_back(std::move(item));
    }
    if (wake) {
      uint64_t one = 1;
      (void)!write(fd_, &one, sizeof one);
    }
  }
  std::vector<Item> take() {
    std::vector<Item> v;
    std::lock_guard<std::mutex> l(mu_);
    v.swap(items_);
    pending_ = false;
    return v;
  }

 private:
  int fd_;
  std::mutex mu_;
  std::vector<Item> items_;
  bool pending_ = false;
};

// Blocks until the socket has messages or the wake descriptor fires (or `ms` pass).
void wait_for(zmq::socket_t& s, int wake_fd, int ms) {
  uint32_t events = 0;
  size_t size = sizeof events;
  zmq_getsockopt(s.handle(), ZMQ_EVENTS, &events, &size);
  if (events & ZMQ_POLLIN) return;
  int zfd = -1;
  size = sizeof zfd;
  zmq_getsockopt(s.handle(), ZMQ_FD, &zfd, &size);
  pollfd p[2] = {{wake_fd, POLLIN, 0}, {zfd, POLLIN, 0}};
  ::poll(p, 2, ms);
  if (p[0].revents & POLLIN) {
    uint64_t v;
    (void)!read(wake_fd, &v, sizeof v);
  }
}

void tune(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
}

}  // namespace

void handoff_server(int port, bool direct) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  tune(router);
  router.bind("tcp://127.0.0.1:" + std::to_string(port));
  while (direct) {
    zmq::message_t id, payload;
    if (!router.recv(id)) continue;
    (void)router.recv(payload);
    router.send(id, zmq::send_flags::sndmore);
    router.send(payload, zmq::send_flags::none);
  }
  Posted replies;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> calls;
  std::thread executor([&] {
    for (;;) {
      Item call;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return !calls.empty(); });
        call = std::move(calls.front());
        calls.pop_front();
      }
      replies.post(std::move(call));  // "ran": the payload goes back
    }
  });
  executor.detach();
  for (;;) {
    for (auto& [id, payload] : replies.take()) {
      router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    wait_for(router, replies.fd(), 100);
    for (;;) {
      zmq::message_t id, payload;
      if (!router.recv(id, zmq::recv_flags::dontwait)) break;
      (void)router.recv(payload);
      std::lock_guard<std::mutex> l(mu);
      bool was_empty = calls.empty();
      calls.emplace_back(id.to_string(), payload.to_string());
      if (was_empty) cv.notify_one();
    }
  }
}

double handoff_pipelined(int port, int in_flight, double seconds) {
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  tune(dealer);
  dealer.connect("tcp://127.0.0.1:" + std::to_string(port));
  Posted requests;
  std::mutex mu;
  std::condition_variable cv;
  long answered = 0;
  std::atomic<bool> running{true};
  std::thread loop([&] {
    while (running.load(std::memory_order_relaxed)) {
      for (auto& item : requests.take()) dealer.send(zmq::buffer(item.second), zmq::send_flags::none);
      wait_for(dealer, requests.fd(), 20);
      long n = 0;
      for (zmq::message_t m; dealer.recv(m, zmq::recv_flags::dontwait);) ++n;
      if (n) {
        std::lock_guard<std::mutex> l(mu);
        answered += n;
        cv.notify_all();
      }
    }
  });
  const std::string payload(64, '\0');
  auto round = [&] {
    long want;
    {
      std::lock_guard<std::mutex> l(mu);
      want = answered + in_flight;
    }
    for (int i = 0; i < in_flight; ++i) requests.post({std::string(), payload});
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return answered >= want; });
  };
  for (int i = 0; i < 20; ++i) round();  // warm-up: connected, buffers grown
  long done = 0;
  auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    round();
    done += in_flight;
  }
  double r = double(done) / std::chrono::duration<double>(Clock::now() - t0).count();
  running = false;
  loop.join();
  return r;
}

}  // namespace bench
