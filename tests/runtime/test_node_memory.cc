// A node's shared object memory: what a process adds reaches the node's counters, small changes
// gathered (never more than NodeMemory::kPublishBytes behind), large ones at once.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "objects/node_memory.h"

using yard::detail::NodeMemory;

TEST_CASE("a process's object bytes reach the node's counters, small ones gathered", "[node-memory]") {
  std::string node = "test-node-memory-" + std::to_string(getpid());
  auto owner = NodeMemory::create(node, 1 << 20, "/tmp");
  REQUIRE(owner);
  auto mine = NodeMemory::attach(node);
  REQUIRE(mine);
  const uint64_t lag = NodeMemory::kPublishBytes;

  // A stream of small results: the node sees them at most kPublishBytes late.
  for (int i = 0; i < 200; ++i) mine->add_used(1000);
  auto seen = owner->totals().used;
  CHECK(seen <= 200000);
  CHECK(seen + lag > 200000);
  CHECK_FALSE(owner->over_limit());

  // A large value is seen at once, and puts the node over its limit.
  mine->add_used(2 << 20);
  CHECK(owner->totals().used >= (2u << 20));
  CHECK(owner->over_limit());

  // Everything released: back under the limit, within the lag of nothing.
  mine->add_used(-(2 << 20));
  for (int i = 0; i < 200; ++i) mine->add_used(-1000);
  CHECK_FALSE(owner->over_limit());
  CHECK(owner->totals().used < lag);
}
