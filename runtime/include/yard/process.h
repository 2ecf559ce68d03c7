// Process helpers the runtime, the daemons and tools beside them use: spawning children that die
// with their parent (and daemons that report readiness), ports, paths, ids, hashes, addresses.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace yard::sys {

struct SpawnOptions {
  std::map<std::string, std::string> env;  // added to (or replacing in) the current environment
  std::string cwd;
  std::string stdout_path;                 // empty: inherit
  std::string stderr_path;                 // empty: same as stdout_path, or inherit
  int death_signal = 0;                    // signal sent to the child when this thread's process dies
  bool new_process_group = false;
  int keep_fd = -1;                        // an extra fd the child inherits
};

// fork + exec. Throws yard::Error with the reason when exec fails.
pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& opts);
// Spawns a daemon that reports readiness with one line on the fd given as `--ready-fd N` (appended
// to argv). Returns its pid and that line (empty when none came within the timeout).
std::pair<pid_t, std::string> spawn_ready(std::vector<std::string> argv, SpawnOptions opts,
                                          std::chrono::milliseconds timeout);

// Heap bytes this process's code holds now (jemalloc's count, every thread), and a request that
// the heap return the memory freed so far to the kernel.
size_t heap_bytes_in_use();
void release_free_heap();
// Keeps what this process frees for reuse from now on (up to the runtime's bound of 1 GiB),
// whatever YARD_MALLOC_RETAIN says: for a training process whose large tensors come and go at the
// same sizes every step.
void keep_freed_heap();
// The environment that gives another program (a peer in a benchmark, a Python process) the heap
// a Switchyard process runs on: LD_PRELOAD of the jemalloc library in use, and its settings.
std::map<std::string, std::string> allocator_environment();

// True while pid exists (and is not a zombie we can reap).
bool pid_alive(pid_t pid);
// True when pid is gone or a zombie waiting to be reaped (works for processes we did not start).
bool process_dead(pid_t pid);
// Sends sig, waits until gone or deadline, then SIGKILL. Reaps when it is our child.
void terminate(pid_t pid, int sig, std::chrono::milliseconds grace);
// A TCP port on host that was free a moment ago.
int free_port(const std::string& host);
// True when something accepts TCP connections at host:port.
bool port_open(const std::string& host, int port);
std::string self_exe();
// prog as found on PATH (prog itself when it has a slash or is not found).
std::string which(const std::string& prog);
// The `yard` executable: $YARD_BIN when set; else the installed one beside the runtime library
// (its bindir), next to this program, in a build tree's scheduler/ folder, or on PATH. Throws
// yard::Error naming every place it looked.
std::string find_yard_binary();
std::string random_hex(size_t bytes);
// SHA-256 (hex) of bytes, and of a file's contents (throws yard::Error when unreadable).
std::string sha256_hex(const void* data, size_t size);
std::string sha256_file(const std::string& path);
std::string hostname();
// "hostname/boot-id", or $YARD_HOST_ID when set: processes with the same host id share /dev/shm
// (a node in a network namespace standing in for another machine sets its own).
const std::string& host_id();
// The local IP address this host uses to reach `host` (no packet is sent); 127.0.0.1 for loopback.
std::string local_ip_toward(const std::string& host);
double unix_time();
// "host:port" -> {host, port}; throws yard::Error with the bad text.
std::pair<std::string, int> split_address(const std::string& addr);

}  // namespace yard::sys

namespace yard::detail {
using namespace yard::sys;  // the runtime's own code names them unqualified
}  // namespace yard::detail
