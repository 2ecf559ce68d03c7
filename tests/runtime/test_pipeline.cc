// The task submitter's pipelining policy, as a pure function.
#include <catch2/catch.hpp>

#include "submit/task_submitter.h"

using yard::detail::pipeline_depth;

TEST_CASE("tasks wait one per worker while more workers may come", "[pipeline]") {
  CHECK(pipeline_depth(false, false, 10) == 1);
  CHECK(pipeline_depth(true, true, 10) == 1);  // a spillback is being asked for
  CHECK(pipeline_depth(false, true, 0) == 1);
}

TEST_CASE("a saturated cluster queues about 5 ms of work per worker", "[pipeline]") {
  CHECK(pipeline_depth(true, false, 0) == 16);     // no measurement yet
  CHECK(pipeline_depth(true, false, 25) == 200);   // short tasks stream
  CHECK(pipeline_depth(true, false, 1000) == 5);
  CHECK(pipeline_depth(true, false, 100000) == 1); // long tasks spread over workers
  CHECK(pipeline_depth(true, false, 0.1) == 1024); // never deeper than 1024
}
