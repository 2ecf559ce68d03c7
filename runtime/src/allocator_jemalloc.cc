// The heap every Switchyard process runs on: jemalloc, linked into the runtime. (A sanitizer build
// runs on the sanitizer's allocator instead: allocator_sanitizer.cc.)
//
// A runtime process hands its allocations between threads all the time (a caller makes a call's
// records, the I/O thread frees them; the I/O thread makes a reply's value, the caller frees it).
// glibc's arenas do badly at that: a chunk freed by another thread goes back under its arena's
// lock, and the allocator took about 40% of a caller's and an executor's time. jemalloc's
// per-thread caches flush such frees in batches.
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "yard/internal/allocator.h"
#include "yard/process.h"

// Read by jemalloc when it starts (before main). Large buffers (objects, tensors) come and go at
// the same sizes step after step: freed memory is kept for reuse instead of going back to the
// kernel, since each reuse would page-fault again (a 100 MB buffer made, filled and freed: 390 ms
// each time with jemalloc's decay, even of 30 s, against 3 ms kept). trim_heap() bounds what is
// kept. Allocations of 8 MiB and more share the arenas (jemalloc's own arena for them returns
// their pages at once).
#define YARD_MALLOC_CONF "oversize_threshold:0,dirty_decay_ms:-1"
extern "C" {
JEMALLOC_EXPORT const char* malloc_conf = YARD_MALLOC_CONF;
}

namespace {
constexpr unsigned kAllArenas = 4096;  // MALLCTL_ARENAS_ALL

template <class T>
bool set_ctl(const std::string& name, T value) {
  return mallctl(name.c_str(), nullptr, nullptr, &value, sizeof value) == 0;
}

// In every arena there is, and in those made later. (Each arena in turn: jemalloc takes no decay
// time for all arenas at once, and writing one through MALLCTL_ARENAS_ALL crashed a process now and
// then.)
void set_decay_everywhere(const char* which, ssize_t ms) {
  set_ctl(std::string("arenas.") + which, ms);
  unsigned n = 0;
  size_t len = sizeof n;
  if (mallctl("arenas.narenas", &n, &len, nullptr, 0) != 0) return;
  for (unsigned i = 0; i < n; ++i) {
    bool initialized = false;
    len = sizeof initialized;
    std::string arena = "arena." + std::to_string(i);
    if (mallctl((arena + ".initialized").c_str(), &initialized, &len, nullptr, 0) == 0 && initialized)
      set_ctl(arena + "." + which, ms);
  }
}

void refresh_stats() {
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  mallctl("epoch", &epoch, &len, &epoch, len);
}

// YARD_MALLOC_RETAIN=0: nothing freed is kept.
bool retain_off() {
  const char* r = getenv("YARD_MALLOC_RETAIN");
  return r && std::strcmp(r, "0") == 0;
}

size_t read_size(const std::string& name) {
  size_t v = 0, len = sizeof v;
  return mallctl(name.c_str(), &v, &len, nullptr, 0) == 0 ? v : 0;
}
}  // namespace

namespace yard::detail {

size_t retained_heap_bytes() {
  refresh_stats();
  return read_size("stats.arenas." + std::to_string(kAllArenas) + ".pdirty") * read_size("arenas.page");
}

void trim_heap(size_t keep) {
  if (retained_heap_bytes() > keep) yard::sys::release_free_heap();
}

void heap_for_daemon() {
  if (!retain_off()) set_decay_everywhere("dirty_decay_ms", 10000);  // when off, it is given back at once
}

void configure_allocator() {
  // YARD_MALLOC_RETAIN=0: freed memory goes back to the kernel at once, in every arena.
  if (retain_off()) {
    set_decay_everywhere("dirty_decay_ms", 0);
    set_decay_everywhere("muzzy_decay_ms", 0);
  }
}

}  // namespace yard::detail

namespace yard::sys {

size_t heap_bytes_in_use() {
  refresh_stats();
  return read_size("stats.allocated");
}

void release_free_heap() {
  mallctl(("arena." + std::to_string(kAllArenas) + ".purge").c_str(), nullptr, nullptr, nullptr, 0);
}

void keep_freed_heap() { set_decay_everywhere("dirty_decay_ms", -1); }

std::map<std::string, std::string> allocator_environment() {
  std::map<std::string, std::string> env = {{"MALLOC_CONF", YARD_MALLOC_CONF}};
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&mallctl), &info) != 0 && info.dli_fname) env["LD_PRELOAD"] = info.dli_fname;
  return env;
}

}  // namespace yard::sys
