// The object memory of one node, shared by its processes: a small shared-memory segment that the
// node manager creates with the node's limit and spill directory, where every process of the node
// (workers, and drivers on the same host) keeps the bytes of the objects it holds in memory in a
// slot of its own. A process whose objects push the node past its limit spills its least
// recently used ones to the spill directory (MemoryStore). Slots of processes that died are
// cleared by the node manager.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace yard::detail {

class NodeMemory {
 public:
  struct Totals {
    uint64_t used = 0, spilled = 0, spilled_objects = 0;
  };
  // The node manager's side: a fresh segment for the node (0: no limit). Unlinked when destroyed.
  static std::unique_ptr<NodeMemory> create(const std::string& node_id, uint64_t limit, const std::string& spill_dir);
  // A process of the node: nullptr when the node's segment is not on this host.
  static std::unique_ptr<NodeMemory> attach(const std::string& node_id);
  ~NodeMemory();

  uint64_t limit() const;
  std::string spill_dir() const;
  // This process's bytes in memory and spilled (its own slot; taken on first use). Changes in
  // memory reach the node's counters once they add up to kPublishBytes either way: what the node
  // sees of a process lags by less than that.
  void add_used(int64_t delta);
  static constexpr int64_t kPublishBytes = 64 * 1024;
  void add_spilled(int64_t bytes, int64_t objects);
  Totals totals() const;
  bool over_limit() const;
  // Node manager: the slots of processes that are gone are freed (their objects went with them).
  void sweep();

 private:
  struct Segment;
  NodeMemory(std::string name, Segment* s, bool owner) : name_(std::move(name)), s_(s), owner_(owner) {}
  int slot();
  std::string name_;
  Segment* s_;
  bool owner_;
  int slot_ = -1;
  std::atomic<int64_t> unpublished_{0};  // add_used's changes not yet in the shared counters
};

}  // namespace yard::detail
