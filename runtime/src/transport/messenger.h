// What a part of a process (a submitter, the executor, the head's actor manager) needs of the
// process's I/O loop: request ids, requests and their replies, replies to the requests it serves,
// and work run on the loop thread. A part is handed a Messenger, not the loop: it cannot stop
// the loop, bind listeners or change its limits, and a test can hand it one of its own.
//
// Channel is the process's Messenger: it owns the loop, which its owner opens once the address to
// listen on and the handler of requests are known (a driver after choosing the interface toward
// its head, a daemon in its start()), so that the parts can be made, and handed the channel,
// before that. Using it before it is open, or after it is closed, throws.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io_loop.h"

namespace yard::detail {

class Messenger {
 public:
  using Landing = ReplyLanding;
  virtual ~Messenger() = default;

  // Whether the loop is there to be used (not yet opened, or closed at the end: not).
  virtual bool is_open() const = 0;
  // "host:port" where the process's loop listens.
  virtual const std::string& address() const = 0;
  virtual uint64_t next_request_id() = 0;
  // Thread-safe: IoLoop::request, with frames or with a message made on the loop thread.
  virtual void request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb,
                       std::chrono::milliseconds timeout, Landing landing) = 0;
  virtual void request(const std::string& peer, uint64_t id, OutMessage& m, ReplyCallback cb,
                       std::chrono::milliseconds timeout, Landing landing) = 0;
  void request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb,
               std::chrono::milliseconds timeout) {
    request(peer, id, std::move(frames), std::move(cb), timeout, Landing{});
  }
  void request(const std::string& peer, uint64_t id, OutMessage& m, ReplyCallback cb, std::chrono::milliseconds timeout) {
    request(peer, id, m, std::move(cb), timeout, Landing{});
  }
  // Loop thread: several requests in one message, each reply to its own callback.
  virtual void request_group(const std::string& peer, OutMessage& m,
                             std::vector<std::pair<uint64_t, ReplyCallback>> calls, std::chrono::milliseconds timeout) = 0;
  // Other threads: sends and waits. Throws ConnectionError or TimeoutError.
  virtual std::unique_ptr<InMessage> call(const std::string& peer, OutMessage& msg, uint64_t id,
                                          std::chrono::milliseconds timeout) = 0;
  // Thread-safe: a reply to the requester `routing_id`; reply_soon joins the loop's next turn.
  virtual void reply(std::string routing_id, Frames frames) = 0;
  virtual void reply_soon(std::string routing_id, Frames frames) = 0;
  // Thread-safe: runs fn on the loop thread.
  virtual void post(std::function<void()> fn) = 0;
  // Loop thread only: once, `delay` from now; every `period`; at the end of this turn.
  virtual void after(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  virtual void every(std::chrono::milliseconds period, std::function<void()> fn) = 0;
  virtual void at_turn_end(std::function<void()> fn) = 0;
  virtual bool in_loop() const = 0;
  // The listener's data link for the parts of large values (nullopt on loopback), and, loop
  // thread only, the peer name under which requests go sealed to another process's.
  virtual const std::optional<DataLink>& data_link() const = 0;
  virtual std::string sealed_peer(const DataLink& link) = 0;
};

class Channel final : public Messenger {
 public:
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() override { close(); }

  // Opens the channel on `loop` (made by its owner with the handler of requests). Once.
  IoLoop& open(std::unique_ptr<IoLoop> loop);
  // Stops the loop and lets it go; the channel is closed from then on.
  void close();
  explicit operator bool() const { return loop_ != nullptr; }
  bool is_open() const override { return loop_ != nullptr; }
  // The loop itself, for its owner (stop, limits, listeners beside it).
  IoLoop* operator->() const { return &loop(); }
  IoLoop& loop() const;

  const std::string& address() const override { return loop().address(); }
  uint64_t next_request_id() override { return loop().next_request_id(); }
  using Messenger::request;
  void request(const std::string& peer, uint64_t id, Frames frames, ReplyCallback cb, std::chrono::milliseconds timeout,
               Landing landing) override {
    loop().request(peer, id, std::move(frames), std::move(cb), timeout, std::move(landing));
  }
  void request(const std::string& peer, uint64_t id, OutMessage& m, ReplyCallback cb, std::chrono::milliseconds timeout,
               Landing landing) override {
    loop().request(peer, id, m, std::move(cb), timeout, std::move(landing));
  }
  void request_group(const std::string& peer, OutMessage& m, std::vector<std::pair<uint64_t, ReplyCallback>> calls,
                     std::chrono::milliseconds timeout) override {
    loop().request_group(peer, m, std::move(calls), timeout);
  }
  std::unique_ptr<InMessage> call(const std::string& peer, OutMessage& msg, uint64_t id,
                                  std::chrono::milliseconds timeout) override {
    return loop().call(peer, msg, id, timeout);
  }
  void reply(std::string routing_id, Frames frames) override { loop().reply(std::move(routing_id), std::move(frames)); }
  void reply_soon(std::string routing_id, Frames frames) override {
    loop().reply_soon(std::move(routing_id), std::move(frames));
  }
  void post(std::function<void()> fn) override { loop().post(std::move(fn)); }
  void after(std::chrono::milliseconds delay, std::function<void()> fn) override { loop().after(delay, std::move(fn)); }
  void every(std::chrono::milliseconds period, std::function<void()> fn) override { loop().every(period, std::move(fn)); }
  void at_turn_end(std::function<void()> fn) override { loop().at_turn_end(std::move(fn)); }
  bool in_loop() const override { return loop_ && loop_->in_loop(); }
  const std::optional<DataLink>& data_link() const override { return loop().data_link(); }
  std::string sealed_peer(const DataLink& link) override { return loop().sealed_peer(link); }

 private:
  std::unique_ptr<IoLoop> loop_;
};

}  // namespace yard::detail
