// The lines a node's workers logged for an actor or a task (yard/log.h tags each line with
// "[actor <id> ..." or "[task <id> ..."), for `yard logs --actor` and `--task`. Pure over the
// node's log folder: the workers' logs (worker-*.log) are read, nothing else.
#pragma once

#include <string>

namespace yard::sched {

struct LogQuery {
  std::string actor_id, task_id;  // one of them
  size_t max_lines = 1000;        // the newest this many
};

// The matching lines, oldest first, each prefixed with its worker's log name; "" when none.
// A query naming neither an actor nor a task matches nothing.
std::string find_log_lines(const std::string& log_dir, const LogQuery& q);

}  // namespace yard::sched
