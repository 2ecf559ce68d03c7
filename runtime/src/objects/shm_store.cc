#include "objects/shm_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "yard/process.h"

namespace yard::detail {

namespace {

constexpr size_t kHeader = 128;  // the header, padded to two cache lines (values stay aligned)
constexpr int kHolders = 20;
constexpr size_t kMaxSegments = 32;
constexpr uint64_t kStaleSendNs = 30'000'000'000;  // a message unopened this long was lost

// Written by several processes; every field is a lock-free atomic.
struct Header {
  std::atomic<uint32_t> owner;       // 1 while the owner's ShmBuffer lives
  std::atomic<uint32_t> inflight;    // messages sent with it and not yet opened
  std::atomic<uint64_t> sent_ns;     // CLOCK_MONOTONIC of the latest of those sends
  std::atomic<uint64_t> generation;  // bumped each time the owner reuses the segment
  std::atomic<uint32_t> retired;     // unlinked by its owner: receivers drop their mappings
  std::atomic<int32_t> holders[kHolders];  // pids of receivers with buffers open
};
static_assert(sizeof(Header) <= kHeader);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

Header* header(char* base) { return reinterpret_cast<Header*>(base); }

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

// Removes this host's segments whose writer's pid satisfies `which`.
template <class F>
void remove_segments_if(F which) {
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string file = e.path().filename().string();
    if (file.rfind("yard-obj-", 0) != 0) continue;
    int32_t pid = std::atoi(file.c_str() + 9);
    if (pid > 0 && which(pid)) shm_unlink(("/" + file).c_str());
  }
}

// No receiver holds it (entries of processes that died are cleared on the way).
bool no_holders(Header* h) {
  bool none = true;
  for (auto& e : h->holders) {
    int32_t pid = e.load();
    if (pid == 0) continue;
    if (sys::process_dead(pid)) {
      e.compare_exchange_strong(pid, 0);
      continue;
    }
    none = false;
  }
  return none;
}

bool is_free(Header* h, uint64_t now) {
  if (h->owner.load() != 0) return false;
  if (h->inflight.load() != 0 && now - h->sent_ns.load() < kStaleSendNs) return false;
  return no_holders(h);
}

char* map_fd(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

}  // namespace

struct ShmSegment {
  std::string name;
  char* base = nullptr;
  size_t capacity = 0;
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();
  ~ShmSegment() {
    if (base) munmap(base, capacity);
  }
};

ShmBuffer::ShmBuffer(std::shared_ptr<ShmSegment> seg, size_t size) : seg_(std::move(seg)), size_(size) {}
ShmBuffer::~ShmBuffer() { header(seg_->base)->owner.store(0); }
const char* ShmBuffer::data() const { return seg_->base + kHeader; }
char* ShmBuffer::mutable_data() { return seg_->base + kHeader; }
const std::string& ShmBuffer::segment_name() const { return seg_->name; }


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

void ShmPool::remove_segments_of(int pid) {
  remove_segments_if([pid](int32_t p) { return p == pid; });
}

void ShmPool::remove_orphans() { remove_segments_if([](int32_t p) { return sys::process_dead(p); }); }

// At most half of what /dev/shm has free when the pool is first used.
size_t ShmPool::budget() {
  if (budget_ == 0) {
    struct statvfs st;
    budget_ = statvfs("/dev/shm", &st) == 0 ? size_t(st.f_bavail) * st.f_frsize / 2 : 1;
  }
  return budget_;
}

std::shared_ptr<ShmSegment> ShmPool::create(size_t cap) {
  auto s = std::make_shared<ShmSegment>();
  // Unique per process instance: a later process with the same pid never reuses a name that a
  // receiver may still have mapped.
  static const std::string instance = random_hex(4);
  s->name = prefix_for(getpid()) + instance + "-" + std::to_string(++seq_);
  int fd = shm_open(s->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  // Reserving the pages now turns a full /dev/shm into an error here instead of a SIGBUS later.
  if (ftruncate(fd, static_cast<off_t>(cap)) != 0 || posix_fallocate(fd, 0, static_cast<off_t>(cap)) != 0) {
    close(fd);
    shm_unlink(s->name.c_str());
    return nullptr;
  }
  s->base = map_fd(fd, cap);
  close(fd);
  if (!s->base) {
    shm_unlink(s->name.c_str());
    return nullptr;
  }
  s->capacity = cap;
  return s;
}

std::shared_ptr<ShmBuffer> ShmPool::allocate(size_t size) {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t now = monotonic_ns();
  std::shared_ptr<ShmSegment> seg;
  for (auto& s : segments_) {
    // The smallest free segment that fits, unless it is far too large for the value.
    if (s->capacity < size + kHeader || s->capacity > 4 * (size + kHeader) + (1u << 20)) continue;
    if ((!seg || s->capacity < seg->capacity) && is_free(header(s->base), now)) seg = s;
  }
  if (seg) {
    Header* h = header(seg->base);
    h->owner.store(1);
    h->generation.fetch_add(1);
    // A receiver that took a holder entry before the new generation was visible reads the old
    // value: the segment is not ours yet.
    if (!no_holders(h)) {
      h->owner.store(0);
      seg = nullptr;
    } else {
      h->inflight.store(0);
    }
  }
  if (!seg) {
    size_t cap = kHeader + std::max<size_t>(size, kShmMinBytes);
    cap = (cap + (cap >> 3) + 4095) & ~size_t(4095);  // an eighth more, so slightly larger values fit next time
    size_t total = 0;
    for (auto& s : segments_) total += s->capacity;
    if (segments_.size() >= kMaxSegments || total + cap > budget()) return nullptr;
    seg = create(cap);
    if (!seg) return nullptr;
    Header* h = header(seg->base);
    h->owner.store(1);
    h->generation.store(1);
    segments_.push_back(seg);
  }
  seg->last_used = std::chrono::steady_clock::now();
  return std::make_shared<ShmBuffer>(seg, size);
}

std::shared_ptr<ShmBuffer> ShmPool::copy(const char* data, size_t size) {
  auto b = allocate(size);
  if (b) std::memcpy(b->mutable_data(), data, size);
  return b;
}

ShmSlot ShmPool::share(const ShmBuffer& b) {
  auto& seg = b.segment();
  Header* h = header(seg.base);
  h->sent_ns.store(monotonic_ns());
  h->inflight.fetch_add(1);
  return ShmSlot{seg.name, h->generation.load(), kHeader, b.size()};
}

ShmPool::Stats ShmPool::stats() {
  std::lock_guard<std::mutex> l(mu_);
  Stats st;
  uint64_t now = monotonic_ns();
  for (auto& s : segments_) {
    ++st.segments;
    st.bytes += s->capacity;
    st.in_use += is_free(header(s->base), now) ? 0 : 1;
  }
  return st;
}

void ShmPool::unlink_all() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& s : segments_) {
    header(s->base)->retired.store(1);
    shm_unlink(s->name.c_str());
  }
}

// ---- the receiving side -------------------------------------------------------------------

namespace {

// Another process's segment mapped here; unmapped when the last buffer and the cache drop it.
struct Mapping {
  char* base = nullptr;
  size_t size = 0;
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();
  ~Mapping() {
    if (base) munmap(base, size);
  }
};

// This process's holder entry in a segment's header, shared by every buffer it made from it.
struct Hold {
  std::shared_ptr<Mapping> m;
  int entry = -1;
  ~Hold() { header(m->base)->holders[entry].store(0); }
};

class SlotBuffer final : public Buffer {
 public:
  SlotBuffer(std::shared_ptr<Hold> h, uint64_t off, uint64_t size) : h_(std::move(h)), off_(off), size_(size) {}
  const char* data() const override { return h_->m->base + off_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<Hold> h_;
  uint64_t off_, size_;
};

std::mutex g_recv_mu;
std::unordered_map<std::string, std::shared_ptr<Mapping>> g_maps;  // guarded by g_recv_mu
std::unordered_map<std::string, std::weak_ptr<Hold>> g_holds;      // guarded by g_recv_mu

// The segment's mapping, opened once per process; null (and *err) when it cannot be.
std::shared_ptr<Mapping> map_segment(const std::string& name, OpenedSlot* err) {
  auto it = g_maps.find(name);
  if (it != g_maps.end()) return it->second;
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    *err = {nullptr, SlotError::kCannotOpen, "cannot open shared-memory segment " + name + ": " + std::strerror(errno)};
    return nullptr;
  }
  struct stat st;
  char* p = nullptr;
  if (fstat(fd, &st) == 0 && size_t(st.st_size) >= kHeader) p = map_fd(fd, static_cast<size_t>(st.st_size));
  close(fd);
  if (!p) {
    *err = {nullptr, SlotError::kCannotMap, "cannot map shared-memory segment " + name};
    return nullptr;
  }
  auto m = std::make_shared<Mapping>();
  m->base = p;
  m->size = static_cast<size_t>(st.st_size);
  g_maps[name] = m;
  return m;
}

std::shared_ptr<Hold> take_hold(const std::string& name, const std::shared_ptr<Mapping>& m) {
  if (auto h = g_holds[name].lock()) return h;
  Header* hd = header(m->base);
  int32_t self = static_cast<int32_t>(getpid());
  for (int i = 0; i < kHolders; ++i) {
    int32_t expected = 0;
    if (hd->holders[i].compare_exchange_strong(expected, self)) {
      auto h = std::make_shared<Hold>();
      h->m = m;
      h->entry = i;
      g_holds[name] = h;
      return h;
    }
  }
  return nullptr;
}

}  // namespace

OpenedSlot open_shm_slot(const ShmSlot& slot) {
  std::lock_guard<std::mutex> l(g_recv_mu);
  OpenedSlot out;
  auto m = map_segment(slot.name, &out);
  if (!m) return out;
  m->last_used = std::chrono::steady_clock::now();
  if (slot.offset < kHeader || slot.offset + slot.size > m->size)
    return {nullptr, SlotError::kOutsideSegment, "slot outside shared-memory segment " + slot.name};
  Header* hd = header(m->base);
  auto hold = take_hold(slot.name, m);  // before the generation is checked: see ShmPool::allocate
  if (hd->generation.load() != slot.generation)
    return {nullptr, SlotError::kReused,
            "shared-memory segment " + slot.name + " was reused before the value was read"};
  if (hold) {
    out.bytes = std::make_shared<SlotBuffer>(hold, slot.offset, slot.size);
  } else {  // every holder entry is taken: read a copy
    out.bytes = std::make_shared<StringBuffer>(std::string(m->base + slot.offset, slot.size));
  }
  hd->inflight.fetch_sub(1);
  return out;
}

void ShmPool::trim(std::chrono::milliseconds idle) {
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    uint64_t ns = monotonic_ns();
    for (auto it = segments_.begin(); it != segments_.end();) {
      Header* h = header((*it)->base);
      if (now - (*it)->last_used >= idle && is_free(h, ns)) {
        h->retired.store(1);
        shm_unlink((*it)->name.c_str());
        it = segments_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::lock_guard<std::mutex> l(g_recv_mu);
  for (auto it = g_holds.begin(); it != g_holds.end();) it = it->second.expired() ? g_holds.erase(it) : std::next(it);
  for (auto it = g_maps.begin(); it != g_maps.end();) {
    bool unused = it->second.use_count() == 1;
    bool drop = unused && (header(it->second->base)->retired.load() || now - it->second->last_used >= idle);
    it = drop ? g_maps.erase(it) : std::next(it);
  }
}

}  // namespace yard::detail

// ---- the codec's buffers ------------------------------------------------------------------

namespace yard::detail {

namespace {
class HeapBuffer final : public Buffer {
 public:
  explicit HeapBuffer(size_t n) : p_(new char[n]), n_(n) {}
  const char* data() const override { return p_.get(); }
  size_t size() const override { return n_; }
  char* mutable_data() { return p_.get(); }

 private:
  std::unique_ptr<char[]> p_;
  size_t n_;
};
}  // namespace

WritableBytes allocate_bytes(size_t size) {
  if (size >= kShmMinBytes)
    if (auto b = ShmPool::instance().allocate(size)) return {b, b->mutable_data()};
  auto b = std::make_shared<HeapBuffer>(size);
  return {b, b->mutable_data()};
}

}  // namespace yard::detail
