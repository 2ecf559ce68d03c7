// A job's timeline in Chrome's trace-event format (what Perfetto and chrome://tracing open): one
// process row per node, one thread row per worker process (the node manager's own for lease
// waits), a complete event ("X") per task, actor call or lease. Pure: spans in, document out.
#pragma once

#include <string>
#include <vector>

namespace yard::sched {

// `batches`: what the nodes appended (yard:timeline:<job>, wire::TimelineBatch bytes); unreadable
// ones are skipped and counted.
std::string chrome_trace(const std::string& job, const std::vector<std::string>& batches);

}  // namespace yard::sched
