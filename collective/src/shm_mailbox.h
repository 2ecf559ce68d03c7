// Point-to-point send and receive between ranks of one host, through shared memory.
//
// ShmPipe is one direction between two ranks: a byte ring in shared memory with one writer and one
// reader. A side that has to wait (ring full, or empty) spins a moment, then sleeps on a futex in
// the segment that the other side wakes when it moves its counter; every sleep is a short slice,
// after which the caller's check runs (a dead peer, a passed deadline).
//
// ShmMail is a group's post: a pipe for every ordered pair of ranks, messages framed with their tag
// and length. Messages from one peer are read in the order they were sent; one that a receive did
// not ask for (another tag) is kept aside for the receive that does, so receives of different tags
// from one peer may run concurrently on different threads, as with Gloo. A send returns once its
// bytes are in the ring (the ring is the receiver's buffer), so a message smaller than the ring
// does not wait for its receive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace yard::collective {

class ShmPipe {
 public:
  // Called while waiting, every few milliseconds: throws to give up (peer dead, deadline passed).
  using Check = std::function<void()>;

  static size_t bytes_for(size_t capacity);
  // `at` is bytes_for(capacity) bytes of zero-filled shared memory, the same for both sides.
  ShmPipe(char* at, size_t capacity);

  void write(const void* data, size_t n, const Check& check);
  void read(void* data, size_t n, const Check& check);
  // Bytes read so far (tells whether a failed read stopped inside a message).
  uint64_t consumed() const;

 private:
  struct Header;
  Header* h_;
  char* ring_;
  size_t cap_;
};

class ShmMail {
 public:
  // Checks that a wait on `peer` may go on; throws CollectiveError naming the peer when it died or
  // the deadline passed.
  using PeerCheck = std::function<void(int peer, std::chrono::steady_clock::time_point deadline)>;

  static size_t bytes_for(int world, size_t capacity);
  ShmMail(char* at, int world, int rank, size_t capacity, PeerCheck check);

  void send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);
  void recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout);

 private:
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    bool reading = false;  // a receive is reading from the pipe
    std::string broken;    // why the stream from this peer cannot be read any more
    std::map<uint32_t, std::deque<std::vector<char>>> early;  // messages of other tags, by tag
  };
  struct Outbox {
    std::mutex mu;
    std::string broken;
  };
  ShmPipe& pipe(int from, int to);
  bool take_early(Inbox& in, int peer, uint32_t tag, void* data, size_t bytes);
  void read_until(Inbox& in, int peer, uint32_t tag, void* data, size_t bytes,
                  std::chrono::steady_clock::time_point deadline);

  int world_, rank_;
  std::vector<ShmPipe> pipes_;  // from * world + to (the diagonal unused)
  std::vector<std::unique_ptr<Inbox>> in_;
  std::vector<std::unique_ptr<Outbox>> out_;
  PeerCheck check_;
};

}  // namespace yard::collective
