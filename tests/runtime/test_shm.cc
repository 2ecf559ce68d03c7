// The shared-memory pool's bookkeeping in one process (and a forked receiver that dies): who
// holds a segment, when it is reused, and that a slot of a reused segment is never read.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include <catch2/catch.hpp>

#include "objects/shm_store.h"

using namespace yard::detail;
using namespace std::chrono_literals;

namespace {
std::shared_ptr<ShmBuffer> filled(size_t n, char c) {
  auto b = ShmPool::instance().allocate(n);
  REQUIRE(b);
  std::memset(b->mutable_data(), c, n);
  return b;
}
bool exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }
}  // namespace

TEST_CASE("a shared slot opens as the same bytes and pins its segment until released", "[shm]") {
  ShmPool::instance().trim(0ms);
  auto b = filled(2 << 20, 'a');
  std::string seg = b->segment_name();
  auto slot = ShmPool::instance().share(*b);
  b.reset();  // the owner lets go: the message in flight still holds it
  auto other = filled(2 << 20, 'b');
  CHECK(other->segment_name() != seg);
  auto got = open_shm_slot(slot).bytes;
  REQUIRE(got);
  CHECK(got->size() == (2u << 20));
  CHECK(got->data()[0] == 'a');
  CHECK(got->data()[(2 << 20) - 1] == 'a');
  other.reset();
  auto third = filled(2 << 20, 'c');  // the received buffer still holds the first segment
  CHECK(third->segment_name() != seg);
  CHECK(got->data()[12345] == 'a');
  third.reset();
  got.reset();
  auto again = filled(2 << 20, 'd');  // free now: reused (the oldest of equal fits)
  CHECK(again->segment_name() == seg);
  CHECK(ShmPool::instance().stats().in_use == 1);
}

TEST_CASE("a slot whose segment was reused is refused, not read", "[shm]") {
  ShmPool::instance().trim(0ms);
  auto b = filled(3 << 20, 'x');
  std::string seg = b->segment_name();
  auto slot = ShmPool::instance().share(*b);
  REQUIRE(open_shm_slot(slot).bytes);  // opened and released at once
  b.reset();
  auto reused = filled(3 << 20, 'y');
  REQUIRE(reused->segment_name() == seg);
  auto stale = open_shm_slot(slot);
  CHECK_FALSE(stale.bytes);
  CHECK(stale.error == SlotError::kReused);
  CHECK_THAT(stale.what, Catch::Contains("reused") && Catch::Contains(seg));
}

TEST_CASE("a slot outside its segment, or in no segment, is refused with the reason", "[shm]") {
  ShmPool::instance().trim(0ms);
  auto b = filled(1 << 20, 'o');
  auto slot = ShmPool::instance().share(*b);
  auto past = slot;
  past.offset += 64ull << 20;
  auto outside = open_shm_slot(past);
  CHECK_FALSE(outside.bytes);
  CHECK(outside.error == SlotError::kOutsideSegment);
  CHECK_THAT(outside.what, Catch::Contains(slot.name));
  auto gone = slot;
  gone.name = "/yard-obj-no-such-segment";
  auto missing = open_shm_slot(gone);
  CHECK_FALSE(missing.bytes);
  CHECK(missing.error == SlotError::kCannotOpen);
  CHECK_THAT(missing.what, Catch::Contains("cannot open") && Catch::Contains(gone.name));
  auto ok = open_shm_slot(slot);
  REQUIRE(ok.error == SlotError::kNone);
  CHECK(ok.bytes->data()[0] == 'o');
}

TEST_CASE("a receiver that died holding a segment does not pin it", "[shm]") {
  ShmPool::instance().trim(0ms);
  auto b = filled(4 << 20, 'p');
  std::string seg = b->segment_name();
  auto slot = ShmPool::instance().share(*b);
  pid_t child = fork();
  if (child == 0) {
    auto held = open_shm_slot(slot).bytes;
    _exit(held && held->data()[0] == 'p' ? 0 : 1);  // exits holding it
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  b.reset();
  auto reused = filled(4 << 20, 'q');
  CHECK(reused->segment_name() == seg);
}

TEST_CASE("free segments are unlinked once idle; held ones stay", "[shm]") {
  auto held = filled(2 << 20, 'h');
  auto freed = filled(5 << 20, 'f');
  std::string held_name = held->segment_name(), freed_name = freed->segment_name();
  freed.reset();
  REQUIRE(exists(freed_name));
  ShmPool::instance().trim(0ms);
  CHECK_FALSE(exists(freed_name));
  CHECK(exists(held_name));
  held.reset();
  ShmPool::instance().trim(0ms);
  CHECK_FALSE(exists(held_name));
  CHECK(ShmPool::instance().stats().segments == 0);
}

TEST_CASE("large vectors and strings are encoded straight into shared memory", "[shm][codec]") {
  std::vector<float> v(1 << 19, 1.5f);  // 2 MiB
  auto bytes = yard::encode(v);
  CHECK(dynamic_cast<const ShmBuffer*>(bytes.get()) != nullptr);
  CHECK(yard::decode<std::vector<float>>(bytes) == v);
  auto small = yard::encode(std::vector<float>(16, 2.0f));
  CHECK(dynamic_cast<const ShmBuffer*>(small.get()) == nullptr);
  std::string s(3 << 20, 'z');
  auto sb = yard::encode(s);
  CHECK(dynamic_cast<const ShmBuffer*>(sb.get()) != nullptr);
  CHECK(yard::decode<std::string>(sb) == s);
}
