// MemoryStore: the objects this process owns (task results it is waiting for, put values).
//
// Entries are created when a task is submitted or a value is put, completed once (value or
// error) from any thread, and erased when the last ObjectRef is gone. Waiting suspends only the
// calling fiber and always has a deadline.
//
// With the node's object memory attached (NodeMemory), the bytes of its values count toward the
// node's limit; while the node is over it, a spilling thread writes this process's least recently
// used values of 64 KiB and more to the node's spill directory and drops them from memory. A
// spilled value is read back on its next use; its file goes when the object is released.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "yard/codec.h"

namespace yard::detail {

struct ErrorInfo {
  int code = 0;  // wire::ErrorCode
  std::string type, message, location;
};

class NodeMemory;

class MemoryStore {
 public:
  using Duration = std::chrono::milliseconds;
  MemoryStore();
  ~MemoryStore();
  // Counts this process's values toward the node's limit, spilling when over it.
  void attach_node_memory(std::unique_ptr<NodeMemory> node);
  void create(const std::string& id);
  // Completes an entry; ignored when the entry was released or already completed.
  void set_value(const std::string& id, Bytes value);
  void set_error(const std::string& id, ErrorInfo error);
  // The same bytes in another buffer (moved into shared memory): for a ready entry that still
  // holds `old`.
  void replace_value(const std::string& id, const Bytes& old, Bytes now);
  void release(const std::string& id);
  // Runs fn (on the completing thread, or now) once the entry is complete or gone.
  void on_ready(const std::string& id, std::function<void()> fn);
  // The value now; nullopt when not ready. An error entry returns its error.
  struct Snapshot {
    Bytes value;
    std::optional<ErrorInfo> error;
    bool present = false;
  };
  Snapshot peek(const std::string& id);
  bool contains(const std::string& id);
  // Blocks the calling fiber until ready or timeout. Throws the stored error as a typed exception.
  Bytes get(const std::string& id, Duration timeout);
  // Indices of the ready entries once `num` are ready (or gone) or the timeout passed.
  std::vector<size_t> wait(const std::vector<std::string>& ids, size_t num, Duration timeout);
  // Every value, in order, as get() of each in turn would give them (the first error in order is
  // thrown), waiting once for all of them rather than once each. The caller holds the ids' refs.
  std::vector<Bytes> get_all(const std::vector<std::string>& ids, Duration timeout);
  size_t size();
  // The calling thread runs calls on fibers (an executor's): its waits suspend only the fiber.
  static void mark_fiber_thread();

 private:
  struct Waiter;
  struct Entry {
    bool ready = false;
    Bytes value;
    std::unique_ptr<ErrorInfo> error;  // rare: kept out of line
    uint64_t counted = 0;              // bytes counted toward the node's memory
    uint64_t last_use = 0;             // for choosing what to spill
    std::string spill_path;            // set: the value is on disk, not in memory
    // Those waiting for it: most entries have none or one, kept without an allocation.
    std::shared_ptr<Waiter> waiter;
    std::vector<std::shared_ptr<Waiter>> more_waiters;
    void add_waiter(std::shared_ptr<Waiter> w) {
      if (!waiter) waiter = std::move(w);
      else more_waiters.push_back(std::move(w));
    }
    void remove_waiter(const std::shared_ptr<Waiter>& w);
    std::vector<std::function<void()>> callbacks;
  };
  void complete(const std::string& id, Bytes value, std::optional<ErrorInfo> error);
  void count_used(int64_t delta);  // under mu_
  void drop_waiter(const std::string& id, const std::shared_ptr<Waiter>& w);
  // Under mu_: the entry's value, read back from disk when spilled.
  Bytes use(const std::string& id, Entry& e);
  void spill_loop();
  bool spill_one();

  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
  uint64_t tick_ = 0;                               // guarded by mu_
  int64_t unpublished_ = 0;                         // guarded by mu_: bytes not yet given to node_
  std::unique_ptr<NodeMemory> node_;
  std::condition_variable spill_cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread spiller_;
};

void remove_spill_file(const std::string& path);

// Throws the yard exception that matches an ErrorInfo.
[[noreturn]] void throw_error(const ErrorInfo& e);

}  // namespace yard::detail
