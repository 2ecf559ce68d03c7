#include "objects/node_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "yard/process.h"

namespace yard::detail {

namespace {
constexpr int kSlots = 256;
std::string segment_name(const std::string& node_id) {
  std::string n = "/yard-mem-";
  for (char c : node_id) n += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return n;
}
}  // namespace

struct NodeMemory::Segment {
  int32_t owner_pid;  // the node manager that made it
  uint64_t limit;
  std::atomic<int64_t> used;  // the sum of the slots' `used`: one load to compare with the limit
  char spill_dir[512];
  struct Slot {
    std::atomic<int32_t> pid;
    std::atomic<int64_t> used, spilled, spilled_objects;
  } slots[kSlots];
};

namespace {
// Segments of node managers that died without removing theirs (kill -9).
void remove_orphans() {
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string file = e.path().filename().string();
    if (file.rfind("yard-mem-", 0) != 0) continue;
    int32_t pid = 0;
    if (FILE* f = std::fopen(e.path().c_str(), "rb")) {
      if (std::fread(&pid, sizeof pid, 1, f) != 1) pid = 0;
      std::fclose(f);
    }
    if (pid > 0 && sys::process_dead(pid)) shm_unlink(("/" + file).c_str());
  }
}
}  // namespace

std::unique_ptr<NodeMemory> NodeMemory::create(const std::string& node_id, uint64_t limit, const std::string& spill_dir) {
  remove_orphans();
  std::string name = segment_name(node_id);
  shm_unlink(name.c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(Segment)) == 0) p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return nullptr;
  }
  auto* s = static_cast<Segment*>(p);  // zero-filled: every slot free
  s->owner_pid = getpid();
  s->limit = limit;
  std::strncpy(s->spill_dir, spill_dir.c_str(), sizeof s->spill_dir - 1);
  return std::unique_ptr<NodeMemory>(new NodeMemory(name, s, true));
}

std::unique_ptr<NodeMemory> NodeMemory::attach(const std::string& node_id) {
  if (node_id.empty()) return nullptr;
  std::string name = segment_name(node_id);
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  return std::unique_ptr<NodeMemory>(new NodeMemory(name, static_cast<Segment*>(p), false));
}

NodeMemory::~NodeMemory() {
  if (slot_ >= 0 && !owner_) {
    auto& sl = s_->slots[slot_];
    s_->used.fetch_sub(sl.used.exchange(0));
    sl.spilled.store(0);
    sl.spilled_objects.store(0);
    sl.pid.store(0);
  }
  munmap(s_, sizeof(Segment));
  if (owner_) shm_unlink(name_.c_str());
}

uint64_t NodeMemory::limit() const { return s_->limit; }
std::string NodeMemory::spill_dir() const { return std::string(s_->spill_dir, strnlen(s_->spill_dir, sizeof s_->spill_dir)); }

int NodeMemory::slot() {
  if (slot_ >= 0) return slot_;
  int32_t self = getpid();
  for (int i = 0; i < kSlots; ++i) {
    int32_t expected = 0;
    if (s_->slots[i].pid.compare_exchange_strong(expected, self)) return slot_ = i;
  }
  return -1;  // a node with more than kSlots object-holding processes: the rest are not counted
}

void NodeMemory::add_used(int64_t delta) {
  int i = slot();
  if (i < 0) return;
  // Small changes gather here and are published together: the node's counters are shared with
  // every process of the node, and a stream of small results would otherwise contend for them.
  int64_t gathered = unpublished_.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (gathered < kPublishBytes && gathered > -kPublishBytes) return;
  int64_t take = unpublished_.exchange(0, std::memory_order_relaxed);
  s_->slots[i].used.fetch_add(take);
  s_->used.fetch_add(take);
}

void NodeMemory::add_spilled(int64_t bytes, int64_t objects) {
  if (int i = slot(); i >= 0) {
    s_->slots[i].spilled.fetch_add(bytes);
    s_->slots[i].spilled_objects.fetch_add(objects);
  }
}

NodeMemory::Totals NodeMemory::totals() const {
  Totals t;
  for (auto& sl : s_->slots) {
    if (sl.pid.load() == 0) continue;
    t.used += uint64_t(std::max<int64_t>(0, sl.used.load()));
    t.spilled += uint64_t(std::max<int64_t>(0, sl.spilled.load()));
    t.spilled_objects += uint64_t(std::max<int64_t>(0, sl.spilled_objects.load()));
  }
  return t;
}

bool NodeMemory::over_limit() const { return s_->limit > 0 && s_->used.load() > int64_t(s_->limit); }

void NodeMemory::sweep() {
  for (auto& sl : s_->slots) {
    int32_t pid = sl.pid.load();
    if (pid == 0 || !sys::process_dead(pid)) continue;
    s_->used.fetch_sub(sl.used.exchange(0));
    sl.spilled.store(0);
    sl.spilled_objects.store(0);
    sl.pid.compare_exchange_strong(pid, 0);
  }
}

}  // namespace yard::detail
