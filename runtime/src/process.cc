#include "yard/process.h"

#include <openssl/evp.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "yard/errors.h"

extern char** environ;

#ifndef YARD_LIB_TO_BIN
#define YARD_LIB_TO_BIN "../bin"
#endif

namespace yard::sys {

pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& opts) {
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : opts.env) env[k] = v;
  std::vector<std::string> env_strs;
  for (auto& [k, v] : env) env_strs.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strs) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  for (auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  std::string out = opts.stdout_path;
  std::string err = opts.stderr_path.empty() ? opts.stdout_path : opts.stderr_path;

  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (opts.death_signal) {
      prctl(PR_SET_PDEATHSIG, opts.death_signal);
      if (getppid() != parent) _exit(127);
    }
    if (opts.new_process_group) setpgid(0, 0);
    if (!out.empty()) {
      int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) { dup2(fd, 1); close(fd); }
    }
    if (!err.empty()) {
      int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) { dup2(fd, 2); close(fd); }
    }
    if (opts.keep_fd >= 0) {
      int flags = fcntl(opts.keep_fd, F_GETFD);
      fcntl(opts.keep_fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    if (!opts.cwd.empty() && chdir(opts.cwd.c_str()) != 0) {
      int e = errno;
      (void)!write(pipefd[1], &e, sizeof e);
      _exit(127);
    }
    execve(args[0], args.data(), envp.data());
    int e = errno;
    (void)!write(pipefd[1], &e, sizeof e);
    _exit(127);
  }
  close(pipefd[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(pipefd[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(pipefd[0]);
  if (n == sizeof child_errno) {
    waitpid(pid, nullptr, 0);
    throw Error("cannot run " + argv[0] + ": " + strerror(child_errno));
  }
  return pid;
}

bool pid_alive(pid_t pid) {
  if (pid <= 0) return false;
  int status;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid) return false;  // reaped
  return kill(pid, 0) == 0 || errno == EPERM;
}

bool process_dead(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[256] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close_paren = std::strrchr(buf, ')');
  return n > 0 && close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

void terminate(pid_t pid, int sig, std::chrono::milliseconds grace) {
  if (pid <= 0) return;
  kill(pid, sig);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!pid_alive(pid)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

int free_port(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    throw Error("cannot find a free port on " + host + ": " + strerror(errno));
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool port_open(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    close(fd);
    return false;
  }
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string which(const std::string& prog) {
  namespace fs = std::filesystem;
  if (prog.find('/') != std::string::npos) return prog;
  if (const char* path = getenv("PATH")) {
    std::string p(path);
    size_t start = 0;
    while (start <= p.size()) {
      auto end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      auto cand = fs::path(p.substr(start, end - start)) / prog;
      if (access(cand.c_str(), X_OK) == 0 && !fs::is_directory(cand)) return cand.string();
      start = end + 1;
    }
  }
  return prog;
}

std::string find_yard_binary() {
  namespace fs = std::filesystem;
  // An explicit choice wins (and keeps a build tree's tests off an installed `yard`).
  if (const char* b = getenv("YARD_BIN"); b && *b) return b;
  std::vector<fs::path> looked;
  // The runtime's own location: the installed shared library (its bindir, relative to its
  // libdir), or the program it is linked into (the same folder, and a build tree's layout).
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&find_yard_binary), &info) && info.dli_fname) {
    auto lib = fs::path(info.dli_fname);
    if (lib.filename().string().rfind("libyard.so", 0) == 0) looked.push_back(lib.parent_path() / YARD_LIB_TO_BIN / "yard");
  }
  auto self = fs::path(self_exe());
  for (auto dir : {self.parent_path(), self.parent_path().parent_path() / "scheduler",
                   self.parent_path().parent_path().parent_path() / "scheduler"})
    looked.push_back(dir / "yard");
  for (auto& cand : looked) {
    std::error_code ec;
    if (fs::is_regular_file(cand, ec) && access(cand.c_str(), X_OK) == 0) return fs::weakly_canonical(cand, ec).string();
  }
  if (auto onpath = which("yard"); onpath != "yard") return onpath;
  std::string where;
  for (auto& cand : looked) where += " " + cand.lexically_normal().string() + ",";
  throw Error("cannot find the `yard` executable: YARD_BIN is not set, and it is not at" + where +
              " nor on PATH; install Switchyard, put `yard` on PATH or set YARD_BIN to its path");
}

std::string random_hex(size_t bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          (uint64_t(getpid()) << 32) ^
                                          uint64_t(std::hash<std::thread::id>{}(std::this_thread::get_id()))};
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    auto b = static_cast<unsigned>(rng() & 0xff);
    s.push_back(hex[b >> 4]);
    s.push_back(hex[b & 15]);
  }
  return s;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

const std::string& host_id() {
  static const std::string id = [] {
    // Set for processes that must count as another host though they share this one's /dev/shm
    // (a node in a network namespace standing in for a second machine).
    if (const char* h = std::getenv("YARD_HOST_ID"); h && *h) return std::string(h);
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

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::pair<std::string, int> split_address(const std::string& addr) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    throw Error("bad address '" + addr + "': expected host:port");
  int port = 0;
  try {
    size_t used = 0;
    port = std::stoi(addr.substr(colon + 1), &used);
    if (used != addr.size() - colon - 1) throw std::invalid_argument("x");
  } catch (const std::exception&) {
    throw Error("bad address '" + addr + "': the port is not a number");
  }
  if (port <= 0 || port > 65535) throw Error("bad address '" + addr + "': port out of range");
  std::string host = addr.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  return {host, port};
}

}  // namespace yard::sys

namespace yard::sys {

std::string sha256_hex(const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

std::string sha256_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return sha256_hex(bytes.data(), bytes.size());
}

}  // namespace yard::sys

namespace yard::sys {

std::string local_ip_toward(const std::string& host) {
  if (host.empty() || host == "localhost" || host.rfind("127.", 0) == 0) return "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(9);
  std::string out = "127.0.0.1";
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    char buf[INET_ADDRSTRLEN];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 && inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf))
      out = buf;
  }
  close(fd);
  return out;
}

}  // namespace yard::sys

namespace yard::sys {

std::pair<pid_t, std::string> spawn_ready(std::vector<std::string> argv, SpawnOptions opts,
                                          std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw ConnectionError("pipe failed");
  argv.push_back("--ready-fd");
  argv.push_back(std::to_string(fds[1]));
  opts.keep_fd = fds[1];
  pid_t pid;
  try {
    pid = spawn(argv, opts);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char c;
    if (read(fds[0], &c, 1) <= 0 || c == '\n') break;
    line.push_back(c);
  }
  close(fds[0]);
  return {pid, line};
}

}  // namespace yard::sys
