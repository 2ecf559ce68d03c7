// The process's heap (runtime/src/allocator_jemalloc.cc): jemalloc is the allocator in use, freed
// memory is kept for reuse, trim_heap gives it back past its bound, and a daemon's heap decays.
#include <catch2/catch.hpp>
#include <jemalloc/jemalloc.h>

#include <cstring>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "yard/internal/allocator.h"
#include "yard/process.h"

namespace {
// Touched, so the pages are really there, and read back, so nothing is optimised away.
std::unique_ptr<char[]> filled(size_t n) {
  std::unique_ptr<char[]> p(new char[n]);
  std::memset(p.get(), 7, n);
  return p;
}
}  // namespace

TEST_CASE("the heap counts what this process holds", "[allocator]") {
  size_t before = yard::sys::heap_bytes_in_use();
  auto p = filled(64 << 20);
  REQUIRE(p[12345] == 7);
  // jemalloc's count: glibc's malloc (were it the one in use) would leave it unchanged. (Within a
  // MiB: the process's other threads may free a little meanwhile.)
  CHECK(yard::sys::heap_bytes_in_use() + (1 << 20) >= before + (64 << 20));
  p.reset();
  CHECK(yard::sys::heap_bytes_in_use() < before + (64 << 20));
}

TEST_CASE("freed memory is kept for reuse, and trimmed past the bound", "[allocator]") {
  yard::sys::release_free_heap();
  size_t base = yard::detail::retained_heap_bytes();
  std::vector<std::unique_ptr<char[]>> bufs;
  for (int i = 0; i < 4; ++i) bufs.push_back(filled(32 << 20));
  bufs.clear();
  size_t kept = yard::detail::retained_heap_bytes();
  INFO("kept " << kept << " bytes, " << base << " before");
  CHECK(kept >= base + (100 << 20));
  yard::detail::trim_heap(size_t{1} << 40);  // under the bound: kept
  CHECK(yard::detail::retained_heap_bytes() >= base + (100 << 20));
  yard::detail::trim_heap(64 << 20);  // over it: given back
  CHECK(yard::detail::retained_heap_bytes() < (64 << 20));
}

TEST_CASE("YARD_MALLOC_RETAIN=0 gives freed memory back; keep_freed_heap keeps it again", "[allocator]") {
  // Both change the arenas there are already (this thread's among them), not only later ones.
  setenv("YARD_MALLOC_RETAIN", "0", 1);
  yard::detail::configure_allocator();
  unsetenv("YARD_MALLOC_RETAIN");
  yard::sys::release_free_heap();
  filled(64 << 20).reset();
  CHECK(yard::detail::retained_heap_bytes() < (32 << 20));
  yard::sys::keep_freed_heap();
  filled(64 << 20).reset();
  CHECK(yard::detail::retained_heap_bytes() >= (64 << 20));
}

TEST_CASE("a daemon's heap gives freed memory back after jemalloc's decay", "[allocator]") {
  // This thread's arena, read through jemalloc's own controls.
  auto decay = [] {
    unsigned arena = 0;
    size_t len = sizeof arena;
    REQUIRE(mallctl("thread.arena", &arena, &len, nullptr, 0) == 0);
    ssize_t ms = 0;
    len = sizeof ms;
    REQUIRE(mallctl(("arena." + std::to_string(arena) + ".dirty_decay_ms").c_str(), &ms, &len, nullptr, 0) == 0);
    return ms;
  };
  CHECK(decay() == -1);  // a runtime process keeps freed memory
  yard::detail::heap_for_daemon();
  CHECK(decay() == 10000);
  yard::sys::keep_freed_heap();  // as the rest of this process expects
  CHECK(decay() == -1);
}
