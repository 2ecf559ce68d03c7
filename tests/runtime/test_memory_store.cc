// How a process waits for its objects: a plain thread (a driver's) on the system's primitives,
// a thread that runs calls on fibers (an executor's) suspending only the waiting fiber.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <boost/fiber/all.hpp>

#include "objects/memory_store.h"
#include "yard/errors.h"

using yard::detail::MemoryStore;
using namespace std::chrono_literals;

namespace {
yard::detail::Bytes text(const std::string& s) { return yard::detail::copy_bytes(s.data(), s.size()); }
std::string text_of(const yard::detail::Bytes& b) { return std::string(b->data(), b->data() + b->size()); }
}  // namespace

TEST_CASE("a plain thread waits for values another thread completes", "[memory-store]") {
  MemoryStore store;
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    ids.push_back("obj-" + std::to_string(i));
    store.create(ids.back());
  }
  std::thread completer([&] {
    for (int i = 0; i < 200; ++i) store.set_value(ids[static_cast<size_t>(i)], text("v" + std::to_string(i)));
  });
  auto values = store.get_all(ids, 30000ms);
  completer.join();
  REQUIRE(values.size() == 200);
  CHECK(text_of(values[0]) == "v0");
  CHECK(text_of(values[199]) == "v199");

  // A value that never comes: the wait ends at its deadline, with nothing ready.
  store.create("never");
  auto t0 = std::chrono::steady_clock::now();
  auto ready = store.wait({"never"}, 1, 200ms);
  CHECK(ready.empty());
  CHECK(std::chrono::steady_clock::now() - t0 >= 200ms);
  CHECK_THROWS_AS(store.get("never", 50ms), yard::TimeoutError);
}

TEST_CASE("on an executor's thread a wait suspends only the waiting fiber", "[memory-store]") {
  MemoryStore store;
  store.create("x");
  std::string got;
  // Both fibers on one thread: the value comes from the second only if the first's wait lets
  // it run (a wait that held the thread would time out).
  std::thread t([&] {
    MemoryStore::mark_fiber_thread();
    boost::fibers::fiber waiter([&] { got = text_of(store.get("x", 10000ms)); });
    boost::fibers::fiber setter([&] { store.set_value("x", text("from the other fiber")); });
    waiter.join();
    setter.join();
  });
  t.join();
  CHECK(got == "from the other fiber");
}
