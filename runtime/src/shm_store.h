// Same-node transfer of large values through shared memory instead of loopback TCP.
//
// The process that sends a large value (a task result, an object fetched by a borrower) to a
// process on the same host writes it into a segment of its ShmPool — reused segments whose pages
// are already faulted in — and sends only the segment's name, offset and size. The receiver maps
// the segment once (ShmCache keeps the mapping) and reads the bytes in place; the value's buffer
// marks the segment free again when it is released (an atomic flag in the segment header), so no
// message goes back. A sender that finds no free segment, or a receiver that cannot map one, falls
// back to sending the bytes through the socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "yard/codec.h"

namespace yard::detail {

inline constexpr size_t kShmMinBytes = 1 << 20;

// "hostname/boot-id": two processes with the same host id share /dev/shm.
const std::string& host_id();

struct ShmSlot {
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
};

class ShmPool {
 public:
  // Process-wide; its segment names are unlinked at exit.
  static ShmPool& instance();
  // Copies the bytes into a free segment (creating one if needed); nullopt when the pool is full.
  std::optional<ShmSlot> put(const char* data, size_t size);
  // Removes this process's segment names (their memory lives on while mapped elsewhere).
  void unlink_all();
  // The name prefix of a process's segments (the node manager cleans up after dead workers).
  static std::string prefix_for(int pid);

 private:
  struct Segment {
    std::string name;
    char* base = nullptr;
    size_t capacity = 0;
  };
  std::mutex mu_;
  std::vector<Segment> segments_;  // guarded by mu_
  uint64_t seq_ = 0;
};

// Opens a received slot as a buffer that frees the segment when released. nullptr on failure.
Bytes open_shm_slot(const ShmSlot& slot);

}  // namespace yard::detail
