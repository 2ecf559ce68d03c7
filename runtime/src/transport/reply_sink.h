// Where the replies to calls go. Each path a call comes by answers through a sink of its own, set
// on the call (Incoming::reply_to) where it is queued: a call port answers on its own socket
// (call_port.h); the executor's thread answers what its I/O loop handed it through that loop, with
// small replies grouped per requester (execute/loop_replies.h); a pool of calls, or the I/O thread
// itself, answers one reply at a time through the loop. Whoever runs a call answers it through
// its sink and never asks which path it came by.
#pragma once

#include <cstdint>
#include <string>

#include "wire.h"

namespace yard::detail {

struct Incoming;

class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Whether a small reply may be written into the group held for its requester (group_reply).
  virtual bool groups() const = 0;
  // Only where groups(): the envelope of the reply to `call` in the group held for its requester,
  // for the caller to set a small body; then replied().
  virtual wire::Envelope::Builder group_reply(const Incoming& call) = 0;
  // After group_reply's body is set. `more`: another call waits already, whose reply may join.
  virtual void replied(bool more) = 0;
  // A reply that travels alone (a large one, or one with values beside it), after those held.
  virtual void reply(const Incoming& call, OutMessage& m, bool more) = 0;
  // Sends the replies held.
  virtual void flush() = 0;
};

}  // namespace yard::detail
