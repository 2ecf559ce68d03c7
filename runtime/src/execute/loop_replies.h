// The executor's replies through its process's I/O loop (reply_sink.h). GroupedReplies serves the
// executor's own thread: small replies are written into the group held for their requester and
// the group is handed to the loop when it must leave; with more calls queued, a reply may wait
// for the loop's next turn to leave beside theirs (IoLoop::reply_soon). LoopReplies serves any
// other thread (the I/O thread's refusals, a concurrent actor's pools): each reply is handed to
// the loop on its own.
#pragma once

#include "transport/framing.h"
#include "transport/messenger.h"
#include "transport/reply_sink.h"

namespace yard::detail {

class GroupedReplies final : public ReplySink {
 public:
  GroupedReplies(Channel& io, const std::string& token) : io_(io), held_(token, batch_cap()) {}
  bool groups() const override { return true; }
  wire::Envelope::Builder group_reply(const Incoming& call) override;
  void replied(bool more) override;
  void reply(const Incoming& call, OutMessage& m, bool more) override;
  void flush() override { send_held(false); }

 private:
  void send_held(bool soon);  // `soon`: the group may leave with other replies in the next turn

  Channel& io_;
  HeldReplies held_;  // executor thread
};

class LoopReplies final : public ReplySink {
 public:
  explicit LoopReplies(Channel& io) : io_(io) {}
  bool groups() const override { return false; }
  wire::Envelope::Builder group_reply(const Incoming& call) override;  // never: it groups nothing
  void replied(bool) override {}
  void reply(const Incoming& call, OutMessage& m, bool) override;
  void flush() override {}

 private:
  Channel& io_;
};

}  // namespace yard::detail
