// The heap of a sanitizer build (-Db_sanitize=...): the sanitizer's own allocator replaces malloc,
// so jemalloc is not linked (runtime/src/allocator_jemalloc.cc is the heap of every other build).
// Its counts come from the sanitizer; there is nothing to configure, keep or trim.
#include <cstddef>
#include <map>
#include <string>

#include "yard/internal/allocator.h"
#include "yard/process.h"

// The sanitizers' allocator interface (every sanitizer runtime exports it; GCC installs no header
// for it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
extern "C" size_t __sanitizer_get_free_bytes();

namespace yard::detail {

void configure_allocator() {}
size_t retained_heap_bytes() { return __sanitizer_get_free_bytes(); }
void trim_heap(size_t) {}
void heap_for_daemon() {}

}  // namespace yard::detail

namespace yard::sys {

size_t heap_bytes_in_use() { return __sanitizer_get_current_allocated_bytes(); }
void release_free_heap() {}
void keep_freed_heap() {}
std::map<std::string, std::string> allocator_environment() { return {}; }

}  // namespace yard::sys
