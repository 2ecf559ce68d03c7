#include "shm_channel.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "yard/process.h"
#include "bf16.h"
#include "rendezvous_store.h"

namespace yard::collective {

namespace {

constexpr size_t kLine = 64;

std::atomic<uint64_t>* epoch_of(char* base, int r) {
  return reinterpret_cast<std::atomic<uint64_t>*>(base + static_cast<size_t>(r) * kLine);
}
// Each rank's process id, next to its epoch: a waiting rank notices a dead peer at once.
std::atomic<int32_t>* pid_of(char* base, int r) {
  return reinterpret_cast<std::atomic<int32_t>*>(base + static_cast<size_t>(r) * kLine + 8);
}

template <class T>
void reduce_into(T* out, const char* const* srcs, int n, size_t count, ReduceOp op) {
  const T* first = reinterpret_cast<const T*>(srcs[0]);
  if (out != first) std::memcpy(out, first, count * sizeof(T));
  for (int q = 1; q < n; ++q) {
    const T* s = reinterpret_cast<const T*>(srcs[q]);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        for (size_t i = 0; i < count; ++i) out[i] += s[i];
        break;
      case ReduceOp::kProduct:
        for (size_t i = 0; i < count; ++i) out[i] *= s[i];
        break;
      case ReduceOp::kMin:
        for (size_t i = 0; i < count; ++i) out[i] = s[i] < out[i] ? s[i] : out[i];
        break;
      case ReduceOp::kMax:
        for (size_t i = 0; i < count; ++i) out[i] = s[i] > out[i] ? s[i] : out[i];
        break;
    }
  }
  if (op == ReduceOp::kAvg)
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(out[i] / static_cast<T>(n));
}

void reduce_dispatch(DType t, char* out, const char* const* srcs, int n, size_t count, ReduceOp op) {
  switch (t) {
    case DType::kFloat32: return reduce_into(reinterpret_cast<float*>(out), srcs, n, count, op);
    case DType::kFloat64: return reduce_into(reinterpret_cast<double*>(out), srcs, n, count, op);
    case DType::kInt32: return reduce_into(reinterpret_cast<int32_t*>(out), srcs, n, count, op);
    case DType::kInt64: return reduce_into(reinterpret_cast<int64_t*>(out), srcs, n, count, op);
    case DType::kUInt8: return reduce_into(reinterpret_cast<uint8_t*>(out), srcs, n, count, op);
    case DType::kBFloat16: {
      // In float32 blocks, rounded back once at the end.
      constexpr size_t kBlock = 1024;
      float acc[kBlock], v[kBlock];
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      for (size_t base = 0; base < count; base += kBlock) {
        size_t m = std::min(kBlock, count - base);
        const uint16_t* s0 = reinterpret_cast<const uint16_t*>(srcs[0]) + base;
        for (size_t i = 0; i < m; ++i) acc[i] = bf16_to_float(s0[i]);
        for (int q = 1; q < n; ++q) {
          const uint16_t* sq = reinterpret_cast<const uint16_t*>(srcs[q]) + base;
          for (size_t i = 0; i < m; ++i) v[i] = bf16_to_float(sq[i]);
          const char* two[2] = {reinterpret_cast<const char*>(acc), reinterpret_cast<const char*>(v)};
          reduce_into(acc, two, 2, m, op == ReduceOp::kAvg ? ReduceOp::kSum : op);
        }
        if (op == ReduceOp::kAvg)
          for (size_t i = 0; i < m; ++i) acc[i] /= static_cast<float>(n);
        for (size_t i = 0; i < m; ++i) o[base + i] = float_to_bf16(acc[i]);
      }
      return;
    }
  }
}

}  // namespace

ShmChannel::ShmChannel(GroupStore& store, const GroupSpec& spec, size_t chunk_bytes)
    : group_(spec.name), rank_(spec.rank), world_(spec.world_size) {
  // A chunk holds whole elements of every dtype (8 bytes) for each of the world's sub-ranges.
  chunk_ = std::max<size_t>(8 * world_, chunk_bytes / (8 * world_) * (8 * world_));
  size_t header = ((static_cast<size_t>(world_) * kLine + 4095) / 4096) * 4096;
  bytes_ = header + static_cast<size_t>(world_ + 2) * chunk_;
  const size_t mail_at = (bytes_ + 4095) / 4096 * 4096;
  const size_t mail_capacity = std::clamp<size_t>(chunk_, 64, 1 << 20);
  if (world_ <= kMailWorld) mail_bytes_ = ShmMail::bytes_for(world_, mail_capacity);
  std::string name;
  int fd = -1;
  if (rank_ == 0) {
    name = "/yard-coll-" + sys::random_hex(8);
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(mail_at + mail_bytes_)) != 0) {
      if (fd >= 0) close(fd);
      throw CollectiveError("group '" + group_ + "': cannot create shared memory " + name + ": " + strerror(errno));
    }
    store.set("shm", std::vector<char>(name.begin(), name.end()));
  } else {
    auto v = store.get("shm");
    name.assign(v.begin(), v.end());
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) throw CollectiveError("group '" + group_ + "': cannot open shared memory " + name + ": " + strerror(errno));
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  // The pipes' pages are left to be touched by the pairs that use them.
  void* m = mail_bytes_ ? mmap(nullptr, mail_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(mail_at))
                        : nullptr;
  close(fd);
  if (p == MAP_FAILED || m == MAP_FAILED) {
    int err = errno;
    if (p != MAP_FAILED) munmap(p, bytes_);
    if (m && m != MAP_FAILED) munmap(m, mail_bytes_);
    throw CollectiveError("group '" + group_ + "': cannot map shared memory: " + strerror(err));
  }
  base_ = static_cast<char*>(p);
  slots_ = base_ + header;
  if (m) {
    mail_base_ = static_cast<char*>(m);
    mail_ = std::make_unique<ShmMail>(mail_base_, world_, rank_, mail_capacity,
                                      [this](int q, std::chrono::steady_clock::time_point d) { check_peer(q, d); });
  }
  pid_of(base_, rank_)->store(getpid(), std::memory_order_release);
  // Everyone attached: the name can go; the memory lives while anyone maps it.
  if (store.incr("shm_attached") == world_) shm_unlink(name.c_str());
}

ShmChannel::~ShmChannel() {
  mail_.reset();
  if (mail_base_) munmap(mail_base_, mail_bytes_);
  if (base_) munmap(base_, bytes_);
}

void ShmChannel::throw_if_dead(int q) const {
  int32_t pid = pid_of(base_, q)->load(std::memory_order_acquire);
  if (pid > 0 && pid != getpid() && sys::process_dead(pid))
    throw CollectiveError("rank " + std::to_string(q) + " (pid " + std::to_string(pid) + ") died");
}

void ShmChannel::check_peer(int q, std::chrono::steady_clock::time_point deadline) const {
  throw_if_dead(q);
  if (std::chrono::steady_clock::now() > deadline)
    throw CollectiveError("timed out: rank " + std::to_string(q) + " did not answer (died, left, or is stuck)");
}

void ShmChannel::send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  mail_->send(data, bytes, peer, tag, timeout);
}

void ShmChannel::recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  mail_->recv(data, bytes, peer, tag, timeout);
}

void ShmChannel::sync(std::chrono::steady_clock::time_point deadline, const char* op) {
  ++epoch_;
  epoch_of(base_, rank_)->store(epoch_, std::memory_order_release);
  int spins = 0;
  for (int q = 0; q < world_;) {
    if (epoch_of(base_, q)->load(std::memory_order_acquire) >= epoch_) {
      ++q;
      continue;
    }
    if (++spins < 200) {
      __builtin_ia32_pause();
      continue;
    }
    // Then yield; past that, sleep in growing naps: a waiting rank must not take the core from the
    // computation (its own or a neighbour's) when the peer is late.
    if (spins < 2000) {
      sched_yield();
    } else {
      int nap = std::min(200, 5 + (spins - 2000) / 4);
      struct timespec ts{0, nap * 1000L};
      nanosleep(&ts, nullptr);
    }
    if ((spins & 255) == 0) throw_if_dead(q);
    if ((spins & 255) == 0 && std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (int m = 0; m < world_; ++m)
        if (epoch_of(base_, m)->load(std::memory_order_acquire) < epoch_)
          missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      throw CollectiveError("timed out: rank(s) " + missing + " did not arrive (died, left, or are stuck)");
    }
  }
}

void ShmChannel::allreduce(void* data, size_t count, DType t, ReduceOp op, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t es = dtype_size(t);
  size_t per_chunk = chunk_ / es;
  char* d = static_cast<char*>(data);
  std::vector<const char*> srcs(world_);
  for (size_t start = 0; start < count; start += per_chunk) {
    size_t n = std::min(per_chunk, count - start);
    std::memcpy(slot(rank_), d + start * es, n * es);
    sync(deadline, "allreduce");
    // My sub-range of this chunk.
    size_t lo = n * rank_ / world_, hi = n * (rank_ + 1) / world_;
    char* res = result(chunks_);
    if (hi > lo) {
      for (int q = 0; q < world_; ++q) srcs[q] = slot(q) + lo * es;
      reduce_dispatch(t, res + lo * es, srcs.data(), world_, hi - lo, op);
    }
    sync(deadline, "allreduce");
    std::memcpy(d + start * es, res, n * es);
    ++chunks_;
  }
}

void ShmChannel::broadcast(void* data, size_t count, DType t, int root, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t es = dtype_size(t);
  size_t per_chunk = chunk_ / es;
  char* d = static_cast<char*>(data);
  for (size_t start = 0; start < count; start += per_chunk) {
    size_t n = std::min(per_chunk, count - start);
    char* res = result(chunks_);
    if (rank_ == root) std::memcpy(res, d + start * es, n * es);
    sync(deadline, "broadcast");
    if (rank_ != root) std::memcpy(d + start * es, res, n * es);
    ++chunks_;
  }
  // The last buffer may still be read; the next operation's first barrier orders it, because
  // writers only touch a result buffer after a barrier that every reader passed after reading.
  sync(deadline, "broadcast");
}

void ShmChannel::allgather(const void* in, void* out, size_t count, DType t, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t es = dtype_size(t);
  size_t per_chunk = chunk_ / es;
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (size_t start = 0; start < count; start += per_chunk) {
    size_t n = std::min(per_chunk, count - start);
    std::memcpy(slot(rank_), src + start * es, n * es);
    sync(deadline, "allgather");
    for (int q = 0; q < world_; ++q) std::memcpy(dst + (q * count + start) * es, slot(q), n * es);
    sync(deadline, "allgather");
  }
}

void ShmChannel::barrier(std::chrono::milliseconds timeout) {
  sync(std::chrono::steady_clock::now() + timeout, "barrier");
}

}  // namespace yard::collective
