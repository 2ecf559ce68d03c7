#include "wire.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <kj/exception.h>

#include "objects/shm_store.h"
#include "yard/process.h"

namespace yard::detail {

zmq::message_t frame_of(const Bytes& b) {
  auto* keep = new Bytes(b);
  return zmq::message_t(const_cast<char*>(b->data()), b->size(),
                        [](void*, void* hint) { delete static_cast<Bytes*>(hint); }, keep);
}

namespace {
// Per thread and size: trivially destructible, so still usable while the thread's other objects
// are destroyed at its exit; the reaper frees what is kept then and closes the pools.
constexpr size_t kScratchKept[2] = {64, 4};
constexpr size_t kScratchClosed = ~size_t(0);
thread_local capnp::word* scratch_free[2][64];
thread_local size_t scratch_count[2] = {0, 0};
struct ScratchReaper {
  ~ScratchReaper() {
    for (int k = 0; k < 2; ++k) {
      for (size_t i = 0; i < scratch_count[k]; ++i) std::free(scratch_free[k][i]);
      scratch_count[k] = kScratchClosed;
    }
  }
};
thread_local ScratchReaper scratch_reaper;
}  // namespace

ScratchSegment::ScratchSegment(bool large) : large_(large) {
  auto& n = scratch_count[large_];
  if (n != kScratchClosed && n > 0) {
    words_ = scratch_free[large_][--n];
    return;
  }
  words_ = static_cast<capnp::word*>(std::calloc(size(), sizeof(capnp::word)));
  if (!words_) throw std::bad_alloc();
}

// The builder that used it has zeroed what it wrote, so the segment is ready for the next one.
ScratchSegment::~ScratchSegment() {
  auto& n = scratch_count[large_];
  if (n < kScratchKept[large_]) {
    (void)&scratch_reaper;  // registers the reaper for this thread
    scratch_free[large_][n++] = words_;
  } else {
    std::free(words_);
  }
}

OutMessage::OutMessage(const std::string& token, uint64_t request_id, bool is_reply, size_t words) {
  if (words > ScratchSegment::kLargeWords) {
    builder_.emplace(static_cast<capnp::uint>(words));
  } else {
    scratch_.emplace(words > ScratchSegment::kWords);
    builder_.emplace(scratch_->words());
  }
  env_ = builder_->initRoot<wire::Envelope>();
  env_.setVersion(wire::PROTOCOL_VERSION);
  env_.setToken(token);
  env_.setRequestId(request_id);
  env_.setIsReply(is_reply);
  env_.setSenderHost(host_id());
  if (uint64_t e = sender_epoch_.load(std::memory_order_relaxed)) env_.setHeadEpoch(e);
}

std::atomic<uint64_t> OutMessage::sender_epoch_{0};

void OutMessage::set_value(wire::Value::Builder v, const Bytes& b) {
  if (shm_ && b->size() >= kShmMinBytes) {
    // A value already in this process's pool is shared as it is; another is copied in once.
    auto sb = std::dynamic_pointer_cast<const ShmBuffer>(b);
    if (!sb) sb = ShmPool::instance().copy(b->data(), b->size());
    if (sb) {
      auto slot = ShmPool::instance().share(*sb);
      auto r = v.initShm();
      r.setName(slot.name);
      r.setOffset(slot.offset);
      r.setSize(slot.size);
      r.setGeneration(slot.generation);
      return;
    }
  }
  if (b->size() >= kLargeValueBytes) {
    blobs_.push_back(b);
    v.setFrame(static_cast<uint32_t>(blobs_.size()));
  } else {
    v.setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(b->data()), b->size()));
  }
}

size_t flat_size(capnp::MessageBuilder& b) {
  auto segments = b.getSegmentsForOutput();
  size_t total = (segments.size() / 2 + 1) * sizeof(capnp::word);
  for (auto& s : segments) total += s.size() * sizeof(capnp::word);
  return total;
}

// The standard framing (segment count - 1, each segment's size in words, padded to a word, then
// the segments).
void write_flat(capnp::MessageBuilder& b, char* p) {
  auto segments = b.getSegmentsForOutput();
  size_t table = (segments.size() / 2 + 1) * sizeof(capnp::word);
  std::memset(p, 0, table);
  uint32_t n = static_cast<uint32_t>(segments.size() - 1);
  std::memcpy(p, &n, 4);
  for (size_t i = 0; i < segments.size(); ++i) {
    uint32_t w = static_cast<uint32_t>(segments[i].size());
    std::memcpy(p + 4 * (i + 1), &w, 4);
  }
  p += table;
  for (auto& s : segments) {
    std::memcpy(p, s.begin(), s.size() * sizeof(capnp::word));
    p += s.size() * sizeof(capnp::word);
  }
}

size_t OutMessage::flat_bytes() { return flat_size(*builder_); }

void OutMessage::write_flat(char* p) { yard::detail::write_flat(*builder_, p); }

wire::Envelope::Builder ReplyGroup::add(uint64_t request_id) {
  if (!builder_) {
    scratch_.emplace(true);
    builder_.emplace(scratch_->words());
    replies_.reserve(kMaxReplies);
  }
  replies_.push_back(builder_->getOrphanage().newOrphan<wire::Envelope>());
  auto env = replies_.back().get();
  env.setRequestId(request_id);
  env.setIsReply(true);
  return env;
}

zmq::message_t ReplyGroup::take() {
  auto env = builder_->initRoot<wire::Envelope>();
  env.setVersion(wire::PROTOCOL_VERSION);
  env.setToken(token_);
  env.setIsReply(true);
  env.setSenderHost(host_id());
  auto list = env.getBody().initTaskReplies(static_cast<unsigned>(replies_.size()));
  for (unsigned i = 0; i < replies_.size(); ++i) list[i].adoptEnvelope(kj::mv(replies_[i]));
  zmq::message_t out(flat_size(*builder_));
  write_flat(*builder_, static_cast<char*>(out.data()));
  replies_.clear();
  builder_.reset();
  scratch_.reset();
  return out;
}

Frames OutMessage::finish() {
  Frames out;
  out.reserve(1 + blobs_.size());
  zmq::message_t flat(flat_bytes());
  write_flat(static_cast<char*>(flat.data()));
  out.push_back(std::move(flat));
  for (auto& b : blobs_) out.push_back(frame_of(b));
  return out;
}

InMessage::InMessage(Frames frames) : frames_(std::move(frames)) {
  if (frames_.empty()) throw DecodeError("empty message");
  auto& f = frames_[0];
  read_envelope(static_cast<const char*>(f.data()), f.size(), true);
}

InMessage::InMessage(const char* data, size_t size) { read_envelope(data, size, false); }

InMessage::InMessage(std::shared_ptr<const InMessage> group, wire::Envelope::Reader reply)
    : env_(reply), token_(group->token_), group_(std::move(group)) {}

// The envelope's words: read where they are when `in_place` and aligned, else copied once.
void InMessage::read_envelope(const char* data, size_t size, bool in_place) {
  if (size == 0 || size % sizeof(capnp::word) != 0)
    throw DecodeError("envelope of " + std::to_string(size) + " bytes is not a whole number of words");
  if (in_place && reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
    words_ = reinterpret_cast<const capnp::word*>(data);
  } else if (size <= sizeof inline_) {
    std::memcpy(inline_, data, size);
    words_ = inline_;
  } else {
    aligned_ = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
    std::memcpy(aligned_.begin(), data, size);
    words_ = aligned_.begin();
  }
  nwords_ = size / sizeof(capnp::word);
  open();
}

void InMessage::open() {
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = nwords_ * 4 + 64;
  opts.nestingLimit = 16;
  try {
    reader_.reset();
    reader_.emplace(kj::arrayPtr(words_, nwords_), opts);
    env_ = reader_->getRoot<wire::Envelope>();
    if (env_.getVersion() != wire::PROTOCOL_VERSION)
      throw DecodeError("protocol version " + std::to_string(env_.getVersion()) + ", expected " +
                        std::to_string(wire::PROTOCOL_VERSION));
    env_.getBody().which();  // touches the union tag
    token_ = env_.getToken();
  } catch (const kj::Exception& e) {
    throw DecodeError(std::string("malformed envelope: ") + e.getDescription().cStr());
  }
}

void InMessage::rewind() {
  if (!group_) open();
}

bool InMessage::same_host() const {
  if (group_) return group_->same_host();
  try {
    return env_.getSenderHost() == host_id();
  } catch (const kj::Exception&) {
    return false;
  }
}

Bytes InMessage::value(wire::Value::Reader v) const {
  try {
    if (v.isShm()) {
      auto r = v.getShm();
      std::string name = r.getName();
      if (name.rfind("/yard-obj-", 0) != 0 || name.find('/', 1) != std::string::npos)
        throw DecodeError("value refers to a shared-memory segment with a bad name");
      auto slot = open_shm_slot({name, r.getGeneration(), r.getOffset(), r.getSize()});
      if (slot.error != SlotError::kNone) throw DecodeError(slot.what);
      return std::move(slot.bytes);
    }
    if (v.isFrame()) {
      uint32_t i = v.getFrame();
      if (i == 0 || i >= frames_.size())
        throw DecodeError("value refers to frame " + std::to_string(i) + " of " +
                          std::to_string(frames_.size()));
      // Frames are shared by copying the message reference (ZeroMQ counts it), not the bytes.
      zmq::message_t ref;
      ref.copy(const_cast<zmq::message_t&>(frames_[i]));
      return std::make_shared<FrameBuffer>(std::move(ref));
    }
    auto d = v.getInline();
    auto* bytes = reinterpret_cast<const char*>(d.begin());
    if (d.size() <= SmallBuffer::kMax) return std::make_shared<SmallBuffer>(bytes, d.size());
    return std::make_shared<StringBuffer>(std::string(bytes, d.size()));
  } catch (const kj::Exception& e) {
    throw DecodeError(std::string("malformed value: ") + e.getDescription().cStr());
  }
}

namespace {
constexpr unsigned char kBatchMagic[8] = {0xff, 0xff, 0xff, 0x7f, 'Y', 'B', '1', 0};
}

bool is_batch(const zmq::message_t& frame) {
  return frame.size() >= sizeof kBatchMagic && std::memcmp(frame.data(), kBatchMagic, sizeof kBatchMagic) == 0;
}

zmq::message_t pack_batch(const std::vector<Frames>& msgs, size_t from, size_t to) {
  size_t total = sizeof kBatchMagic;
  for (size_t i = from; i < to; ++i) total += 8 + msgs[i][0].size();
  zmq::message_t out(total);
  auto* p = static_cast<char*>(out.data());
  std::memcpy(p, kBatchMagic, sizeof kBatchMagic);
  p += sizeof kBatchMagic;
  for (size_t i = from; i < to; ++i) {
    uint64_t n = msgs[i][0].size();
    std::memcpy(p, &n, 8);
    std::memcpy(p + 8, msgs[i][0].data(), n);
    p += 8 + n;
  }
  return out;
}

namespace {
// Calls fn(data, size) for each message of a batch. Throws DecodeError when the lengths do not
// add up.
template <class F>
void split_batch(const zmq::message_t& frame, F fn) {
  const auto* p = static_cast<const char*>(frame.data()) + sizeof kBatchMagic;
  size_t left = frame.size() - sizeof kBatchMagic;
  if (left == 0) throw DecodeError("an empty batch");
  while (left > 0) {
    uint64_t n = 0;
    if (left < 8) throw DecodeError("a batch ends inside a message's length");
    std::memcpy(&n, p, 8);
    if (n == 0 || n % 8 != 0 || n > left - 8)
      throw DecodeError("a batch holds a message of " + std::to_string(n) + " bytes with " +
                        std::to_string(left - 8) + " left");
    fn(p + 8, static_cast<size_t>(n));
    p += 8 + n;
    left -= 8 + n;
  }
}
}  // namespace

std::vector<Frames> unpack_batch(const zmq::message_t& frame) {
  std::vector<Frames> out;
  split_batch(frame, [&](const char* data, size_t size) {
    Frames f;
    f.emplace_back(data, size);
    out.push_back(std::move(f));
  });
  return out;
}

std::vector<Received> received_of(Frames& frames) {
  std::vector<Received> out;
  if (frames.size() == 1 && is_batch(frames[0])) {
    split_batch(frames[0], [&](const char* data, size_t size) { out.push_back(Received{{}, data, size}); });
    return out;
  }
  out.push_back(Received{std::move(frames), nullptr, 0});
  return out;
}

BatchWriter::BatchWriter(BatchWriter&& o) noexcept
    : cap_(o.cap_), buf_(std::exchange(o.buf_, nullptr)), size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)), count_(std::exchange(o.count_, 0)), last_(o.last_) {}

void BatchWriter::reserve(size_t n) {
  if (n <= capacity_) return;
  // Room for as much as the last batch held, at once: most batches are alike.
  size_t c = std::max<size_t>({n, capacity_ * 2, last_, 4096});
  auto* b = static_cast<char*>(std::realloc(buf_, c));
  if (!b) throw std::bad_alloc();
  buf_ = b;
  capacity_ = c;
}

bool BatchWriter::add(OutMessage& m) {
  size_t n = m.flat_bytes();
  size_t start = count_ == 0 ? sizeof kBatchMagic : size_;
  if (start + 8 + n > cap_) return false;
  reserve(start + 8 + n);
  if (count_ == 0) std::memcpy(buf_, kBatchMagic, sizeof kBatchMagic);
  uint64_t len = n;
  std::memcpy(buf_ + start, &len, 8);
  m.write_flat(buf_ + start + 8);
  size_ = start + 8 + n;
  ++count_;
  return true;
}

zmq::message_t BatchWriter::take() {
  zmq::message_t out;
  if (count_ == 1) {
    out = zmq::message_t(buf_ + sizeof kBatchMagic + 8, size_ - sizeof kBatchMagic - 8);  // alone: as itself
  } else {
    // The frame takes the bytes over: ZeroMQ frees them once sent.
    out = zmq::message_t(buf_, size_, [](void* data, void*) { std::free(data); }, nullptr);
    last_ = std::min(size_, cap_);
    buf_ = nullptr;
    capacity_ = 0;
  }
  size_ = 0;
  count_ = 0;
  return out;
}

std::unique_ptr<InMessage> Received::open() && {
  if (data) return std::make_unique<InMessage>(data, size);
  return std::make_unique<InMessage>(std::move(frames));
}

const char* code_name(wire::ErrorCode c) {
  switch (c) {
    case wire::ErrorCode::OK: return "ok";
    case wire::ErrorCode::BAD_REQUEST: return "bad request";
    case wire::ErrorCode::UNAUTHENTICATED: return "unauthenticated";
    case wire::ErrorCode::NOT_FOUND: return "not found";
    case wire::ErrorCode::INFEASIBLE: return "infeasible";
    case wire::ErrorCode::UNAVAILABLE: return "unavailable";
    case wire::ErrorCode::TASK_ERROR: return "task error";
    case wire::ErrorCode::WORKER_CRASHED: return "worker crashed";
    case wire::ErrorCode::ACTOR_DIED: return "actor died";
    case wire::ErrorCode::TIMEOUT: return "timeout";
    case wire::ErrorCode::VERSION_MISMATCH: return "version mismatch";
    case wire::ErrorCode::INTERNAL: return "internal";
    case wire::ErrorCode::ACTOR_RESTARTING: return "actor restarting";
    case wire::ErrorCode::OWNER_DIED: return "owner died";
    case wire::ErrorCode::STALE_EPOCH: return "stale epoch";
  }
  return "unknown";
}

std::string describe(wire::Error::Reader e) {
  return std::string(code_name(e.getCode())) + ": " + e.getMessage().cStr();
}

void set_resources(capnp::List<wire::Resource>::Builder list, const std::map<std::string, double>& res) {
  unsigned i = 0;
  for (auto& [k, v] : res) {
    list[i].setName(k);
    list[i].setAmount(v);
    ++i;
  }
}

void set_error(wire::Envelope::Builder env, wire::ErrorCode code, const std::string& message,
               const std::string& type, const std::string& location) {
  auto e = env.getBody().initError();
  e.setCode(code);
  e.setMessage(message);
  e.setType(type);
  e.setLocation(location);
}

}  // namespace yard::detail
