// Building and reading Envelopes (runtime/proto/wire.capnp) as ZeroMQ multipart messages.
#pragma once

#include <atomic>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <zmq.hpp>

#include "wire.capnp.h"
#include "yard/codec.h"
#include "yard/internal/states.h"

namespace yard::detail {

// Values at or above this size travel as their own frame instead of inside the Envelope.
inline constexpr size_t kLargeValueBytes = 100 * 1024;

using Frames = std::vector<zmq::message_t>;

// A user value backed by a received ZeroMQ frame: no copy between the socket and the decoder.
class FrameBuffer final : public Buffer {
 public:
  explicit FrameBuffer(zmq::message_t m) : m_(std::move(m)) {}
  const char* data() const override { return static_cast<const char*>(m_.data()); }
  size_t size() const override { return m_.size(); }

 private:
  zmq::message_t m_;
};

// Zero-copy frame over shared bytes: the frame keeps the bytes alive until ZeroMQ has sent them.
zmq::message_t frame_of(const Bytes& b);

// A zeroed first segment for a message builder, reused by the thread that frees it: most
// envelopes fit in it, so building one allocates nothing. A large one holds an actor's calls
// made together (pushTasks): kept too, since a fresh one of that size costs its pages' faults.
class ScratchSegment {
 public:
  static constexpr size_t kWords = 256;
  static constexpr size_t kLargeWords = 8192;
  explicit ScratchSegment(bool large = false);
  ~ScratchSegment();
  ScratchSegment(const ScratchSegment&) = delete;
  ScratchSegment& operator=(const ScratchSegment&) = delete;
  size_t size() const { return large_ ? kLargeWords : kWords; }
  kj::ArrayPtr<capnp::word> words() { return kj::arrayPtr(words_, size()); }

 private:
  bool large_;
  capnp::word* words_;
};

class OutMessage {
 public:
  // `words`: room to build in at once, for a message larger than most (several calls at once):
  // built in one segment, it is read without a segment table's lookups.
  OutMessage(const std::string& token, uint64_t request_id, bool is_reply, size_t words = 0);
  wire::Envelope::Builder env() { return env_; }
  // Stores a value inline when small, as an out-of-band frame when large, in shared memory when
  // large and allow_shared_memory() was called (the receiver is on this host).
  void set_value(wire::Value::Builder v, const Bytes& b);
  void allow_shared_memory() { shm_ = true; }
  bool shared_memory_allowed() const { return shm_; }
  Frames finish();
  // Whether it travels as one frame (no value rides beside it): only such a message joins a batch.
  bool one_frame() const { return blobs_.empty(); }
  // Its first frame's size, and those bytes written at p (the standard framing: the segment
  // table, then the segments). Building goes on no further once they are taken.
  size_t flat_bytes();
  void write_flat(char* p);
  // A head's lease epoch, carried by every message this process sends from now on (headEpoch).
  static void set_sender_epoch(uint64_t epoch) { sender_epoch_.store(epoch, std::memory_order_relaxed); }

 private:
  std::optional<ScratchSegment> scratch_;  // before builder_: outlives it
  std::optional<capnp::MallocMessageBuilder> builder_;
  wire::Envelope::Builder env_{nullptr};
  std::vector<Bytes> blobs_;
  bool shm_ = false;
  static std::atomic<uint64_t> sender_epoch_;
};

// A message's first frame as the standard framing writes it (the segment table, then the
// segments): its size, and its bytes written at p.
size_t flat_size(capnp::MessageBuilder& b);
void write_flat(capnp::MessageBuilder& b, char* p);

// Replies to one requester made into one message (Envelope.taskReplies): each reply an envelope
// of its own, built in the group's segment as it is made, without the token, version and host
// that the group carries once. The receiver hands each on as if it came alone (InMessage's
// group constructor), so its envelope is built, sent, read and checked once for all of them.
class ReplyGroup {
 public:
  static constexpr size_t kMaxReplies = 256;
  explicit ReplyGroup(std::string token) : token_(std::move(token)) {}
  // The envelope of the reply to request_id, marked a reply: the caller sets its body (a small
  // one: nothing beside it, no value beyond a few KiB).
  wire::Envelope::Builder add(uint64_t request_id);
  bool empty() const { return replies_.empty(); }
  size_t count() const { return replies_.size(); }
  // The group's size so far (its replies, without the list that joins them).
  size_t bytes() { return builder_ ? builder_->sizeInWords() * sizeof(capnp::word) : 0; }
  // The group as one frame, and an empty group.
  zmq::message_t take();

 private:
  std::string token_;
  std::optional<ScratchSegment> scratch_;  // before builder_: outlives it
  std::optional<capnp::MallocMessageBuilder> builder_;
  std::vector<capnp::Orphan<wire::Envelope>> replies_;
};

// Replies held for one requester at a time (a call port's, an executor's), as a ReplyGroup: they
// leave before a reply to another requester joins, when the group is full (kMaxReplies, or half of
// `cap` bytes), or when no other call waits whose reply could join them.
class HeldReplies {
 public:
  HeldReplies(std::string token, size_t cap) : group_(std::move(token)), cap_(cap) {}
  bool empty() const { return group_.empty(); }
  // Whether the replies held must leave before one to `to` joins them.
  bool must_leave_for(const std::string& to) const {
    return !empty() && (to != to_ || group_.count() >= ReplyGroup::kMaxReplies);
  }
  // The envelope of the reply to request_id, held for `to` (see ReplyGroup::add).
  wire::Envelope::Builder add(const std::string& to, uint64_t request_id) {
    if (empty()) to_ = to;
    return group_.add(request_id);
  }
  // After a reply: whether the replies held must leave now (`more`: another call waits already).
  bool must_leave_after(bool more) {
    return !more || group_.count() >= ReplyGroup::kMaxReplies || group_.bytes() >= cap_ / 2;
  }
  // The requester and the group as one frame; nothing is held after.
  std::pair<std::string, zmq::message_t> take() { return {std::move(to_), group_.take()}; }

 private:
  ReplyGroup group_;
  size_t cap_;
  std::string to_;
};

// Thrown by InMessage when the bytes are not a valid Envelope.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InMessage {
 public:
  // Takes the frames of one message (without routing frames). Throws DecodeError.
  explicit InMessage(Frames frames);
  // One message of a batch: its bytes, copied into the message's own words. Throws DecodeError.
  InMessage(const char* data, size_t size);
  // One reply of a group (taskReplies): its envelope, read inside the group, which it keeps; the
  // token and host are the group's.
  InMessage(std::shared_ptr<const InMessage> group, wire::Envelope::Reader reply);
  InMessage(const InMessage&) = delete;  // its readers point into it
  InMessage& operator=(const InMessage&) = delete;
  wire::Envelope::Reader env() const { return env_; }
  // The envelope's token, as read once when the message was opened.
  kj::StringPtr token() const { return token_; }
  // True when the sender runs on this host (large replies to it may use shared memory).
  bool same_host() const;
  // The bytes of a value; large values are not copied. Throws DecodeError on a bad frame index.
  Bytes value(wire::Value::Reader v) const;
  // Renews the reading budget (not of a group's reply: it is read once). A message is read with a traversal limit of a few times its size
  // (a guard against amplification); one kept and read again many times — an actor's creation
  // request, placed again after each failure — renews it before each reading. Invalidates
  // readers taken from env() before.
  void rewind();

 private:
  void read_envelope(const char* data, size_t size, bool in_place);
  void open();
  Frames frames_;
  // A copied envelope's words: in the message itself when it is small (most are), else on the heap.
  static constexpr size_t kInlineWords = 48;
  capnp::word inline_[kInlineWords];
  kj::Array<capnp::word> aligned_;
  const capnp::word* words_ = nullptr;
  size_t nwords_ = 0;
  std::optional<capnp::FlatArrayMessageReader> reader_;  // in place: one allocation less per message
  wire::Envelope::Reader env_;
  kj::StringPtr token_;
  std::shared_ptr<const InMessage> group_;  // a group's reply: the message it is read in
};

// Several one-frame messages bound for one peer travel as one frame, a batch, so that a burst of
// small calls and replies costs the transport one message instead of one each: 8 bytes of magic
// (read as a Cap'n Proto segment table they declare 2^31 segments, which no envelope does), then
// for each message its length in bytes (8 bytes, little-endian) and its bytes, a whole number of
// words. Each message in a batch is then read, authenticated and answered as if it came alone.
inline constexpr size_t kBatchMaxBytes = 256 * 1024;
bool is_batch(const zmq::message_t& frame);
// The batch of msgs[from, to), each of one frame whose size is a multiple of 8.
zmq::message_t pack_batch(const std::vector<Frames>& msgs, size_t from, size_t to);
// The messages of a batch. Throws DecodeError when the lengths do not add up.
std::vector<Frames> unpack_batch(const zmq::message_t& frame);
// The messages a received message carries: itself, or a batch's, each a batched message's bytes
// inside `frames` (which must outlive them), read once into its InMessage. Throws DecodeError as
// above.
struct Received {
  Frames frames;                // a message that came alone
  const char* data = nullptr;   // or a batched one's bytes
  size_t size = 0;
  std::unique_ptr<InMessage> open() &&;  // throws DecodeError
};
std::vector<Received> received_of(Frames& frames);

// A batch written as its messages are finished: each message's bytes are copied once, straight
// into the batch, with no frame of its own. Holds messages up to `cap` bytes in all.
class BatchWriter {
 public:
  explicit BatchWriter(size_t cap) : cap_(cap) {}
  ~BatchWriter() { std::free(buf_); }
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;
  BatchWriter(BatchWriter&& o) noexcept;
  BatchWriter& operator=(BatchWriter&&) = delete;
  // Appends m, which must be one_frame(); false (nothing written) when it would take the batch
  // over its cap: take() first, then add it again (a message alone over the cap never fits).
  bool add(OutMessage& m);
  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }
  size_t bytes() const { return size_; }
  // The batch as one frame (a lone message as itself), and an empty writer.
  zmq::message_t take();

 private:
  void reserve(size_t n);
  size_t cap_;
  char* buf_ = nullptr;
  size_t size_ = 0, capacity_ = 0, count_ = 0;
  size_t last_ = 0;   // the last batch's size, taken at once for the next
};

// One-line description of an error body, "<code>: message".
std::string describe(wire::Error::Reader e);
const char* code_name(wire::ErrorCode c);

// Fills an Error reply body.
// A resource map as a message's resource list.
void set_resources(capnp::List<wire::Resource>::Builder list, const std::map<std::string, double>& res);

void set_error(wire::Envelope::Builder env, wire::ErrorCode code, const std::string& message,
               const std::string& type = {}, const std::string& location = {});

// States between their C++ enums and the wire's, which list the same values in the same order.
// A value from the wire that this build does not know (a newer peer's) reads as nullopt.
inline wire::ActorState to_wire(states::ActorState s) { return static_cast<wire::ActorState>(s); }
inline wire::GroupState to_wire(states::GroupState s) { return static_cast<wire::GroupState>(s); }
inline std::optional<states::ActorState> from_wire(wire::ActorState s) {
  if (static_cast<uint16_t>(s) > static_cast<uint16_t>(wire::ActorState::DEAD)) return std::nullopt;
  return static_cast<states::ActorState>(s);
}
inline std::optional<states::GroupState> from_wire(wire::GroupState s) {
  if (static_cast<uint16_t>(s) > static_cast<uint16_t>(wire::GroupState::REMOVED)) return std::nullopt;
  return static_cast<states::GroupState>(s);
}
static_assert(static_cast<int>(wire::ActorState::DEAD) == static_cast<int>(states::ActorState::kDead));
static_assert(static_cast<int>(wire::ActorState::RESTARTING) == static_cast<int>(states::ActorState::kRestarting));
static_assert(static_cast<int>(wire::GroupState::REMOVED) == static_cast<int>(states::GroupState::kRemoved));
static_assert(static_cast<int>(wire::GroupState::RESCHEDULING) == static_cast<int>(states::GroupState::kRescheduling));

}  // namespace yard::detail
