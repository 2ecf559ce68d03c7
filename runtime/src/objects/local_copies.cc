#include "objects/local_copies.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "yard/process.h"

namespace yard::detail::local_copies {

namespace {
constexpr const char* kDir = "/dev/shm/";
constexpr const char* kPrefix = "yard-have-";

std::string path_of(const std::string& id) {
  std::string safe;
  for (char c : id) safe += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return std::string(kDir) + kPrefix + safe;
}

bool alive(pid_t pid) { return pid > 0 && !sys::process_dead(pid); }
}  // namespace

std::optional<std::string> find(const std::string& id) {
  std::ifstream f(path_of(id));
  pid_t pid = 0;
  std::string address;
  if (!(f >> pid >> address) || !alive(pid) || pid == getpid()) return std::nullopt;
  return address;
}

bool announce(const std::string& id, const std::string& address) {
  std::string path = path_of(id);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    std::ifstream f(path);
    pid_t pid = 0;
    if ((f >> pid) && alive(pid)) return false;
    unlink(path.c_str());  // left by a process that died
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return false;
  std::string line = std::to_string(getpid()) + " " + address + "\n";
  bool ok = write(fd, line.data(), line.size()) == ssize_t(line.size());
  close(fd);
  if (!ok) unlink(path.c_str());
  return ok;
}

void withdraw(const std::string& id) {
  std::string path = path_of(id);
  std::ifstream f(path);
  pid_t pid = 0;
  if ((f >> pid) && pid == getpid()) unlink(path.c_str());
}

void sweep() {
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(kDir, ec)) {
    if (e.path().filename().string().rfind(kPrefix, 0) != 0) continue;
    std::ifstream f(e.path());
    pid_t pid = 0;
    if ((f >> pid) && !alive(pid)) std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace yard::detail::local_copies
