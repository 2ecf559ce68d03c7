#include "shm_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>

#include "yard/process.h"

namespace yard::detail {

namespace {
constexpr size_t kHeader = 64;   // the in-use flag, then padding to a cache line
constexpr size_t kMaxSegments = 16;

std::atomic<uint32_t>* flag(char* base) { return reinterpret_cast<std::atomic<uint32_t>*>(base); }

// A segment mapped in a receiving process; unmapped when the last buffer and the cache drop it.
struct Mapping {
  char* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) munmap(base, size);
  }
};

class SlotBuffer final : public Buffer {
 public:
  SlotBuffer(std::shared_ptr<Mapping> m, uint64_t off, uint64_t size) : m_(std::move(m)), off_(off), size_(size) {}
  ~SlotBuffer() override { flag(m_->base)->store(0, std::memory_order_release); }
  const char* data() const override { return m_->base + off_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<Mapping> m_;
  uint64_t off_, size_;
};

std::mutex g_cache_mu;
std::unordered_map<std::string, std::shared_ptr<Mapping>> g_cache;
}  // namespace

const std::string& host_id() {
  static const std::string id = [] {
    char boot[64] = {0};
    if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      if (!std::fgets(boot, sizeof boot, f)) boot[0] = 0;
      std::fclose(f);
    }
    std::string b(boot);
    while (!b.empty() && (b.back() == '\n' || b.back() == ' ')) b.pop_back();
    return hostname() + "/" + b;
  }();
  return id;
}

ShmPool& ShmPool::instance() {
  static ShmPool* p = new ShmPool();  // lives to the end; names are unlinked at exit
  static bool registered = [] {
    std::atexit([] { ShmPool::instance().unlink_all(); });
    return true;
  }();
  (void)registered;
  return *p;
}

std::string ShmPool::prefix_for(int pid) { return "/yard-obj-" + std::to_string(pid) + "-"; }

std::optional<ShmSlot> ShmPool::put(const char* data, size_t size) {
  std::lock_guard<std::mutex> l(mu_);
  Segment* seg = nullptr;
  for (auto& s : segments_) {
    if (s.capacity < size + kHeader) continue;
    uint32_t expected = 0;
    if (flag(s.base)->compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      seg = &s;
      break;
    }
  }
  if (!seg) {
    if (segments_.size() >= kMaxSegments) return std::nullopt;
    size_t cap = kHeader + std::max<size_t>(size, kShmMinBytes);
    cap = (cap + (cap >> 2) + 4095) & ~size_t(4095);  // a quarter more, so slightly larger values fit next time
    Segment s;
    // Unique per process instance: a later process with the same pid never reuses a name that a
    // receiver may still have mapped.
    static const std::string instance = random_hex(4);
    s.name = prefix_for(getpid()) + instance + "-" + std::to_string(++seq_);
    int fd = shm_open(s.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return std::nullopt;
    if (ftruncate(fd, static_cast<off_t>(cap)) != 0) {
      close(fd);
      shm_unlink(s.name.c_str());
      return std::nullopt;
    }
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(s.name.c_str());
      return std::nullopt;
    }
    s.base = static_cast<char*>(p);
    s.capacity = cap;
    flag(s.base)->store(1, std::memory_order_release);
    segments_.push_back(s);
    seg = &segments_.back();
  }
  std::memcpy(seg->base + kHeader, data, size);
  return ShmSlot{seg->name, kHeader, size};
}

void ShmPool::unlink_all() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& s : segments_) shm_unlink(s.name.c_str());
}

Bytes open_shm_slot(const ShmSlot& slot) {
  std::shared_ptr<Mapping> m;
  {
    std::lock_guard<std::mutex> l(g_cache_mu);
    auto it = g_cache.find(slot.name);
    if (it != g_cache.end()) m = it->second;
  }
  if (!m) {
    int fd = shm_open(slot.name.c_str(), O_RDWR, 0600);
    if (fd < 0) return nullptr;
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      return nullptr;
    }
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return nullptr;
    m = std::make_shared<Mapping>();
    m->base = static_cast<char*>(p);
    m->size = static_cast<size_t>(st.st_size);
    std::lock_guard<std::mutex> l(g_cache_mu);
    if (g_cache.size() >= 32)  // forget mappings nobody uses (their writers may be gone)
      for (auto it = g_cache.begin(); it != g_cache.end();)
        it = it->second.use_count() == 1 ? g_cache.erase(it) : std::next(it);
    g_cache[slot.name] = m;
  }
  if (slot.offset < kHeader || slot.offset + slot.size > m->size) return nullptr;
  return std::make_shared<SlotBuffer>(m, slot.offset, slot.size);
}

}  // namespace yard::detail
