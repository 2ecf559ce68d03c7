#include "shm_mailbox.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>

#include "yard/collective.h"

namespace yard::collective {

namespace {

constexpr int kSpins = 64;           // pauses before sleeping (a few microseconds)
constexpr long kSliceNs = 20'000'000;  // one sleep; then the caller's check runs
constexpr uint32_t kMagic = 0x59415244;  // "YARD": a frame that does not start with it is corrupt

// One side's counter and the futex word the other side sleeps on.
struct alignas(64) Side {
  std::atomic<uint64_t> count;     // bytes written (writer's side) or read (reader's side)
  std::atomic<uint32_t> seq;       // bumped after every move of count
  std::atomic<uint32_t> sleepers;  // threads asleep on seq
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

void futex_sleep(std::atomic<uint32_t>* word, uint32_t expect) {
  struct timespec ts{0, kSliceNs};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expect, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Moves a side's counter and wakes whoever sleeps on it. With the sequentially consistent order, a
// sleeper either sees the new count before it sleeps or finds seq changed and does not sleep.
void advance(Side& s, uint64_t to) {
  s.count.store(to, std::memory_order_seq_cst);
  s.seq.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&s.seq);
}

// Waits until ready() holds, sleeping on the other side's futex word.
template <class Ready>
void wait_on(Side& other, const Ready& ready, const ShmPipe::Check& check) {
  for (int i = 0; i < kSpins; ++i) {
    if (ready()) return;
    __builtin_ia32_pause();
  }
  for (;;) {
    uint32_t seen = other.seq.load(std::memory_order_seq_cst);
    other.sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool now = ready();
    if (!now) futex_sleep(&other.seq, seen);
    other.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (now || ready()) return;
    check();
  }
}

CollectiveError size_mismatch(int peer, uint64_t sent, uint32_t tag, size_t expected) {
  return CollectiveError("rank " + std::to_string(peer) + " sent " + std::to_string(sent) + " bytes with tag " +
                         std::to_string(tag) + "; the receive expected " + std::to_string(expected));
}

struct Frame {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};

}  // namespace

struct ShmPipe::Header {
  Side written, read;
};

size_t ShmPipe::bytes_for(size_t capacity) { return (sizeof(Header) + capacity + 63) / 64 * 64; }

ShmPipe::ShmPipe(char* at, size_t capacity)
    : h_(reinterpret_cast<Header*>(at)), ring_(at + sizeof(Header)), cap_(capacity) {}

uint64_t ShmPipe::consumed() const { return h_->read.count.load(std::memory_order_acquire); }

void ShmPipe::write(const void* data, size_t n, const Check& check) {
  const char* src = static_cast<const char*>(data);
  uint64_t w = h_->written.count.load(std::memory_order_relaxed);  // only this side moves it
  while (n > 0) {
    auto space = [&] { return cap_ - size_t(w - h_->read.count.load(std::memory_order_seq_cst)); };
    wait_on(h_->read, [&] { return space() > 0; }, check);
    size_t k = std::min(space(), n), at = size_t(w % cap_), first = std::min(k, cap_ - at);
    std::memcpy(ring_ + at, src, first);
    std::memcpy(ring_, src + first, k - first);
    src += k, n -= k, w += k;
    advance(h_->written, w);
  }
}

void ShmPipe::read(void* data, size_t n, const Check& check) {
  char* dst = static_cast<char*>(data);
  uint64_t r = h_->read.count.load(std::memory_order_relaxed);  // only this side moves it
  while (n > 0) {
    auto ready = [&] { return size_t(h_->written.count.load(std::memory_order_seq_cst) - r); };
    wait_on(h_->written, [&] { return ready() > 0; }, check);
    size_t k = std::min(ready(), n), at = size_t(r % cap_), first = std::min(k, cap_ - at);
    if (dst) {
      std::memcpy(dst, ring_ + at, first);
      std::memcpy(dst + first, ring_, k - first);
      dst += k;
    }
    n -= k, r += k;
    advance(h_->read, r);
  }
}

size_t ShmMail::bytes_for(int world, size_t capacity) {
  return static_cast<size_t>(world) * static_cast<size_t>(world) * ShmPipe::bytes_for(capacity);
}

ShmMail::ShmMail(char* at, int world, int rank, size_t capacity, PeerCheck check)
    : world_(world), rank_(rank), check_(std::move(check)) {
  size_t each = ShmPipe::bytes_for(capacity);
  for (int i = 0; i < world * world; ++i) pipes_.emplace_back(at + static_cast<size_t>(i) * each, capacity);
  for (int i = 0; i < world; ++i) in_.push_back(std::make_unique<Inbox>()), out_.push_back(std::make_unique<Outbox>());
}

ShmPipe& ShmMail::pipe(int from, int to) { return pipes_[static_cast<size_t>(from * world_ + to)]; }

void ShmMail::send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Outbox& out = *out_[static_cast<size_t>(peer)];
  std::lock_guard lk(out.mu);
  if (!out.broken.empty()) throw CollectiveError(out.broken);
  ShmPipe& p = pipe(rank_, peer);
  auto check = [&] { check_(peer, deadline); };
  Frame f{kMagic, tag, bytes};
  try {
    p.write(&f, sizeof f, check);
    p.write(data, bytes, check);
  } catch (const std::exception& e) {
    // Part of a message may be in the ring: nothing more can be framed after it.
    out.broken = std::string("an earlier send to rank ") + std::to_string(peer) + " stopped halfway: " + e.what();
    throw;
  }
}

bool ShmMail::take_early(Inbox& in, int peer, uint32_t tag, void* data, size_t bytes) {
  auto it = in.early.find(tag);
  if (it == in.early.end()) return false;
  std::vector<char> m = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) in.early.erase(it);
  if (m.size() != bytes) throw size_mismatch(peer, m.size(), tag, bytes);
  if (bytes) std::memcpy(data, m.data(), bytes);
  return true;
}

void ShmMail::recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Inbox& in = *in_[static_cast<size_t>(peer)];
  std::unique_lock lk(in.mu);
  // Another receive may be reading from the pipe; it keeps what is not its own aside for us.
  for (;;) {
    if (take_early(in, peer, tag, data, bytes)) return;
    if (!in.broken.empty()) throw CollectiveError(in.broken);
    if (!in.reading) break;
    if (in.cv.wait_until(lk, deadline) == std::cv_status::timeout) check_(peer, deadline);
  }
  in.reading = true;
  lk.unlock();
  struct Done {
    Inbox& in;
    ~Done() {
      std::lock_guard g(in.mu);
      in.reading = false;
      in.cv.notify_all();
    }
  } done{in};
  read_until(in, peer, tag, data, bytes, deadline);
}

// Reads messages from `peer` until the one with `tag`, which lands in data; the others are kept.
void ShmMail::read_until(Inbox& in, int peer, uint32_t tag, void* data, size_t bytes,
                         std::chrono::steady_clock::time_point deadline) {
  ShmPipe& p = pipe(peer, rank_);
  auto check = [&] { check_(peer, deadline); };
  uint64_t at_frame = p.consumed();
  auto broken = [&](const std::string& why) {
    std::lock_guard g(in.mu);
    in.broken = "the messages from rank " + std::to_string(peer) + " cannot be read any more: " + why;
    return CollectiveError(in.broken);
  };
  try {
    for (;;) {
      Frame f{};
      p.read(&f, sizeof f, check);
      if (f.magic != kMagic) {
        at_frame = p.consumed();
        throw broken("a message header is corrupt");
      }
      if (f.tag == tag && f.bytes == bytes) return p.read(data, bytes, check);
      if (f.tag == tag) {
        p.read(nullptr, f.bytes, check);
        at_frame = p.consumed();
        throw size_mismatch(peer, f.bytes, tag, bytes);
      }
      std::vector<char> m(f.bytes);
      p.read(m.data(), m.size(), check);
      at_frame = p.consumed();
      std::lock_guard g(in.mu);
      in.early[f.tag].push_back(std::move(m));
      in.cv.notify_all();
    }
  } catch (const CollectiveError& e) {
    // A wait that gave up between messages leaves the stream whole; inside one, it does not.
    if (p.consumed() != at_frame) throw broken(e.what());
    throw;
  }
}

}  // namespace yard::collective
