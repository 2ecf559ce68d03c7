#include "yard/actors/checkpoint.h"

#include "yard/actors/crc32.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace yard::actors {

namespace fs = std::filesystem;

namespace {

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  auto* b = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
    b += w;
    n -= static_cast<size_t>(w);
  }
}

// Writes bytes to path atomically: temporary file, fsync, rename, fsync of the directory.
void atomic_write(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fsync(fd) != 0) throw std::runtime_error("fsync " + tmp + ": " + strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("rename " + tmp + ": " + strerror(errno));
  int dfd = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

uint64_t step_of(const std::string& name) {
  // ckpt-<step>.bin
  return std::stoull(name.substr(5, name.size() - 9));
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, size_t keep, std::function<void(uint64_t, const std::string&)> on_latest)
    : dir_(std::move(dir)), keep_(std::max<size_t>(1, keep)), on_latest_(std::move(on_latest)) {
  fs::create_directories(dir_);
  thread_ = std::thread([this] { worker(); });
}

CheckpointStore::~CheckpointStore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string CheckpointStore::write(const Checkpoint& c) {
  std::string b;
  b.append("YRDCKPT1", 8);
  put<uint32_t>(b, 1);
  put<uint64_t>(b, c.step);
  put<uint32_t>(b, static_cast<uint32_t>(c.blobs.size()));
  for (auto& [name, data] : c.blobs) {
    put<uint32_t>(b, static_cast<uint32_t>(name.size()));
    b += name;
    put<uint64_t>(b, data.size());
    b += data;
  }
  put<uint32_t>(b, crc32(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%012llu.bin", static_cast<unsigned long long>(c.step));
  std::string path = dir_ + "/" + name;
  atomic_write(path, b);
  atomic_write(dir_ + "/LATEST", std::string(name) + "\n");
  if (on_latest_) on_latest_(c.step, path);
  auto files = list();
  for (size_t i = keep_; i < files.size(); ++i) fs::remove(files[i]);
  return path;
}

void CheckpointStore::write_async(Checkpoint c) {
  auto held = std::make_shared<Checkpoint>(std::move(c));
  write_async(std::function<Checkpoint()>([held] { return std::move(*held); }));
}

void CheckpointStore::write_async(std::function<Checkpoint()> make) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(make));
  }
  cv_.notify_all();
}

void make_background_thread() {
  sched_param none{};
  sched_setscheduler(0, SCHED_BATCH, &none);  // for the calling thread (Linux: a thread is a task)
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

void CheckpointStore::worker() {
  make_background_thread();
  for (;;) {
    std::function<Checkpoint()> make;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      make = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::string err;
    try {
      write(make());
    } catch (const std::exception& e) {
      err = e.what();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      if (!err.empty() && error_.empty()) error_ = err;
    }
    cv_.notify_all();
  }
}

void CheckpointStore::wait() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.empty() && !busy_; });
  if (!error_.empty()) {
    std::string e = std::move(error_);
    error_.clear();
    throw std::runtime_error(e);
  }
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::pair<uint64_t, std::string>> v;
  for (auto& e : fs::directory_iterator(dir_)) {
    auto n = e.path().filename().string();
    if (n.size() > 9 && n.rfind("ckpt-", 0) == 0 && n.compare(n.size() - 4, 4, ".bin") == 0) {
      try {
        v.emplace_back(step_of(n), e.path().string());
      } catch (const std::exception&) {
      }
    }
  }
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [s, p] : v) out.push_back(p);
  return out;
}

Checkpoint CheckpointStore::read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open");
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (b.size() < 8 + 4 + 8 + 4 + 4 || b.compare(0, 8, "YRDCKPT1") != 0) throw std::runtime_error("not a checkpoint (bad magic or too short)");
  uint32_t stored;
  std::memcpy(&stored, b.data() + b.size() - 4, 4);
  if (crc32(reinterpret_cast<const uint8_t*>(b.data()), b.size() - 4) != stored)
    throw std::runtime_error("checksum mismatch (truncated or corrupt)");
  Checkpoint c;
  size_t off = 8;
  auto take = [&](void* out, size_t n) {
    if (n > b.size() - 4 - off) throw std::runtime_error("entries run past the end");
    std::memcpy(out, b.data() + off, n);
    off += n;
  };
  // A declared length is checked against what is left before anything is allocated for it.
  auto take_string = [&](uint64_t n) {
    if (n > b.size() - 4 - off)
      throw std::runtime_error("an entry declares " + std::to_string(n) + " bytes, past the end of the file");
    std::string s(b.data() + off, n);
    off += n;
    return s;
  };
  uint32_t version, entries;
  take(&version, 4);
  if (version != 1) throw std::runtime_error("unknown version " + std::to_string(version));
  take(&c.step, 8);
  take(&entries, 4);
  for (uint32_t i = 0; i < entries; ++i) {
    uint32_t nl;
    take(&nl, 4);
    std::string name = take_string(nl);
    uint64_t sz;
    take(&sz, 8);
    c.blobs.emplace(std::move(name), take_string(sz));
  }
  return c;
}

std::optional<Checkpoint> CheckpointStore::restore() {
  skipped_.clear();
  for (auto& path : list()) {
    try {
      return read_file(path);
    } catch (const std::exception& e) {
      skipped_.push_back(path + ": " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace yard::actors
