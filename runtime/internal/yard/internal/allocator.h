// The process's heap: jemalloc (allocator_jemalloc.cc), configured when the runtime starts; the
// sanitizer's allocator in a sanitizer build (allocator_sanitizer.cc).
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include <cstddef>

namespace yard::detail {

// Applies YARD_MALLOC_RETAIN (0: freed memory goes back to the kernel at once).
void configure_allocator();
// Freed memory the heap keeps for reuse, in bytes.
size_t retained_heap_bytes();
// Returns the kept memory to the kernel when there is more than `keep` of it (as glibc trims the
// top of its heap past its threshold). Called by the runtime's housekeeping, every 0.5 s.
inline constexpr size_t kKeptHeapBytes = size_t{1} << 30;
void trim_heap(size_t keep = kKeptHeapBytes);
// For a daemon (the head, a node manager, simulated nodes), which holds no large buffers that come
// and go: freed memory goes back to the kernel after jemalloc's usual decay of 10 s rather than
// being kept, so the daemon's RSS follows its heap down after a burst (and YARD_MALLOC_RETAIN=0
// still gives it back at once).
void heap_for_daemon();

}  // namespace yard::detail
