// Catch2's main, compiled once. A test binary that is also a Switchyard worker binary calls
// yard::init() from yard_test_worker_hook() before Catch2 parses its arguments.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

__attribute__((weak)) void yard_test_worker_hook(int argc, char** argv);

int main(int argc, char** argv) {
  if (yard_test_worker_hook) yard_test_worker_hook(argc, argv);
  return Catch::Session().run(argc, argv);
}
