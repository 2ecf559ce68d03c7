// MemoryStore's spilling: values to the node's spill directory while the node is over its object
// memory limit, and back on use.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "objects/memory_store.h"
#include "objects/node_memory.h"
#include "yard/errors.h"

namespace yard::detail {

namespace {
constexpr uint64_t kMinSpillBytes = 64 * 1024;  // smaller values stay: their files would cost more

bool write_file(const std::string& path, const Bytes& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(v->data(), 1, v->size(), f) == v->size();
  ok = std::fflush(f) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) unlink(path.c_str());
  return ok;
}

Bytes read_file(const std::string& path, uint64_t size) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return nullptr;
  auto w = allocate_bytes(size);
  bool ok = std::fread(w.data, 1, size, f) == size;
  std::fclose(f);
  return ok ? w.bytes : nullptr;
}
}  // namespace

void remove_spill_file(const std::string& path) { unlink(path.c_str()); }

MemoryStore::MemoryStore() = default;

MemoryStore::~MemoryStore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  spill_cv_.notify_all();
  if (spiller_.joinable()) spiller_.join();
  for (auto& [id, e] : entries_)
    if (!e.spill_path.empty()) remove_spill_file(e.spill_path);
}

void MemoryStore::attach_node_memory(std::unique_ptr<NodeMemory> node) {
  if (!node) return;
  std::lock_guard<std::mutex> l(mu_);
  node_ = std::move(node);
  for (auto& [id, e] : entries_)
    if (e.ready && e.value && !e.counted) {
      e.counted = e.value->size();
      node_->add_used(int64_t(e.counted));
    }
  if (node_->limit() > 0) spiller_ = std::thread([this] { spill_loop(); });
}

Bytes MemoryStore::use(const std::string& id, Entry& e) {
  e.last_use = ++tick_;
  if (e.spill_path.empty()) return e.value;
  Bytes v = read_file(e.spill_path, e.counted);
  if (!v)
    throw Error("object " + id + " was spilled to " + e.spill_path + " and cannot be read back: " + std::strerror(errno));
  remove_spill_file(e.spill_path);
  e.spill_path.clear();
  e.value = v;
  node_->add_spilled(-int64_t(e.counted), -1);
  node_->add_used(int64_t(e.counted));
  if (node_->over_limit()) spill_cv_.notify_one();
  return v;
}

void MemoryStore::spill_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    spill_cv_.wait_for(l, std::chrono::milliseconds(500), [&] { return stop_ || node_->over_limit(); });
    if (stop_) break;
    l.unlock();
    while (node_->over_limit() && spill_one()) {
    }
    l.lock();
  }
}

// Writes this process's least recently used value out; false when it has none to spill (or the
// spill directory refuses it).
bool MemoryStore::spill_one() {
  std::string id;
  Bytes v;
  {
    std::lock_guard<std::mutex> l(mu_);
    Entry* best = nullptr;
    for (auto& [k, e] : entries_)
      if (e.ready && e.value && e.spill_path.empty() && e.counted >= kMinSpillBytes &&
          (!best || e.last_use < best->last_use)) {
        best = &e;
        id = k;
      }
    if (!best) return false;
    v = best->value;
  }
  std::string path = node_->spill_dir() + "/" + std::to_string(getpid()) + "-" + id;
  if (!write_file(path, v)) {
    spdlog::warn("cannot spill object {} to {}: {}", id, path, std::strerror(errno));
    return false;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.value != v) {  // released or read back meanwhile
    remove_spill_file(path);
    return true;
  }
  it->second.value = nullptr;
  it->second.spill_path = path;
  node_->add_used(-int64_t(it->second.counted));
  node_->add_spilled(int64_t(it->second.counted), 1);
  return true;
}

}  // namespace yard::detail
