// A non-concurrent actor's own listener. Its calls arrive on a socket that the worker's executor
// thread owns, and their replies leave from it: a call is not handed from the I/O thread (IoLoop)
// to the executor and its reply back, two thread hand-offs that cost more than the call itself
// for a small method. The port is the actor's address; its worker's IoLoop stays the address of
// everything else (objects, tasks, the node manager's requests).
//
// While the executor runs a call it lets go of the socket, and a watcher thread takes it every
// kWatchTick until the call ends: it answers liveness probes (PING: a caller waiting on a long
// call must not take the worker for frozen) and keeps the calls that arrive meanwhile, in order.
// The socket changes threads only under a mutex, the full memory barrier that ZeroMQ asks of a
// socket used by more than one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "io_loop.h"
#include "reply_sink.h"

namespace yard::detail {

class CallPort final : public ReplySink {
 public:
  static constexpr auto kWatchTick = std::chrono::milliseconds(100);
  // Listens beside `io` (same host, same security, a port of its own). Throws ConnectionError.
  CallPort(IoLoop& io, const std::string& host);
  ~CallPort() override;
  CallPort(const CallPort&) = delete;
  CallPort& operator=(const CallPort&) = delete;

  const std::string& address() const { return address_; }
  // Executor thread: the next call, in arrival order, answered through this port (its
  // reply_to). With `wait`, waits until one comes or until wake() was called (false then).
  bool next(IoLoop::Incoming& out, bool wait = true);
  // Any thread: next() returns (with false if it has no call).
  void wake();
  // The port's replies (reply_sink.h), on the executor thread: small ones join the group held for
  // their requester (wire.h's ReplyGroup), which leaves before one to another requester, when
  // full, or when no other call waits; one that travels alone leaves after the group.
  bool groups() const override { return true; }
  wire::Envelope::Builder group_reply(const Incoming& call) override;
  void replied(bool more) override;
  void reply(const Incoming& call, OutMessage& m, bool more) override;
  // Sends the replies held (before the executor turns to anything else: its process may end
  // there).
  void flush() override;
  // Executor thread, around running a call: the watcher may take the socket meanwhile.
  void call_begins();
  void call_ends();
  // Requests refused from now on: the process is stopping.
  void stop_serving() { stopping_.store(true); }

 private:
  // Holder of the socket only: takes what waits on it, answering probes and refusals there.
  // True when it took anything.
  bool take_waiting();
  // A request that is one call, or several (pushTasks), queued in order; anything else refused.
  void queue_calls(const std::string& routing, const std::string& from, std::unique_ptr<InMessage> msg);
  void refuse(const std::string& routing, uint64_t request_id, wire::ErrorCode code, const std::string& why,
              bool with_token);
  void send(const std::string& routing, Frames& frames);
  void watch();

  IoLoop& io_;
  std::string address_;
  std::unique_ptr<zmq::socket_t> socket_;
  int socket_fd_ = -1;  // readable when the socket has news (ZMQ_FD)
  int wake_fd_ = -1;
  std::mutex mu_;  // held by whoever uses the socket; guards calls_
  std::deque<IoLoop::Incoming> calls_;
  HeldReplies held_;  // executor thread
  std::atomic<bool> in_call_{false};
  std::atomic<bool> stopping_{false};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool closing_ = false;  // guarded by watch_mu_
  std::thread watcher_;
};

}  // namespace yard::detail
