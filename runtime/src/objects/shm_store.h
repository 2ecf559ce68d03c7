// Same-node transfer of large values through shared memory instead of loopback TCP.
//
// A large value this process makes (a vector or string argument as it is encoded, a task's
// result, an object put) lives in a segment of its ShmPool: reused segments whose pages are
// already faulted in. Sending it to a process on the same host sends only the segment's name,
// generation, offset and size — no copy. A value that is not yet in shared memory is copied into
// a segment once, when it is sent.
//
// Who holds a segment is written in its header, so segments are reused and removed without any
// message going back: the owner's flag (set while its buffer lives), a count of messages sent and
// not yet opened, and the pids of receiving processes that have it open. A receiver opens a
// slot by taking a holder entry, checking the generation (a slot whose segment was reclaimed is
// refused, never read), then counting its message as arrived; its entry is cleared when the last
// buffer it made from the segment is released. A segment is free when none of them holds it
// (the entries of dead processes, and messages unopened for 30 s, do not count); free segments
// unused for a few seconds are unlinked. A sender that finds no room, or a receiver that cannot
// map a segment, falls back to the socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "yard/codec.h"

namespace yard::detail {

inline constexpr size_t kShmMinBytes = 1 << 20;

struct ShmSlot {
  std::string name;
  uint64_t generation = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct ShmSegment;

// A value in a segment of this process's pool, writable until it is shared.
class ShmBuffer final : public Buffer {
 public:
  ShmBuffer(std::shared_ptr<ShmSegment> seg, size_t size);
  ~ShmBuffer() override;
  const char* data() const override;
  char* mutable_data();
  size_t size() const override { return size_; }
  const ShmSegment& segment() const { return *seg_; }
  const std::string& segment_name() const;

 private:
  std::shared_ptr<ShmSegment> seg_;
  size_t size_;
};

class ShmPool {
 public:
  // Process-wide; its segment names are unlinked at exit.
  static ShmPool& instance();
  // A buffer of `size` bytes in a free segment (a new one if none fits); nullptr when the pool
  // is at its bounds or shared memory is unavailable.
  std::shared_ptr<ShmBuffer> allocate(size_t size);
  std::shared_ptr<ShmBuffer> copy(const char* data, size_t size);
  // The slot for one message to a receiver on this host; in flight until the receiver opens it.
  ShmSlot share(const ShmBuffer& b);
  // Unlinks segments that are free and were not used for `idle`, and drops this process's
  // mappings of other processes' segments that nobody here uses. Called periodically.
  void trim(std::chrono::milliseconds idle = std::chrono::seconds(3));
  // Removes this process's segment names (their memory lives on while mapped elsewhere).
  void unlink_all();
  // The name prefix of a process's segments.
  static std::string prefix_for(int pid);
  // The node manager's clean-up: a dead worker's segments, and at start those of every process
  // of this host that died without their node manager removing them (kill -9 of both).
  static void remove_segments_of(int pid);
  static void remove_orphans();

  struct Stats {
    size_t segments = 0, bytes = 0, in_use = 0;
  };
  Stats stats();

 private:
  std::shared_ptr<ShmSegment> create(size_t capacity);
  size_t budget();

  std::mutex mu_;
  std::vector<std::shared_ptr<ShmSegment>> segments_;  // guarded by mu_
  uint64_t seq_ = 0;
  size_t budget_ = 0;
};

// A received slot, opened: its bytes, or why it cannot be read.
enum class SlotError { kNone, kCannotOpen, kCannotMap, kOutsideSegment, kReused };
struct OpenedSlot {
  Bytes bytes;  // null unless error is kNone
  SlotError error = SlotError::kNone;
  std::string what;  // the error, said with the segment's name
};

OpenedSlot open_shm_slot(const ShmSlot& slot);

}  // namespace yard::detail
