// What a line of yard::log (yard/log.h) is tagged with: the actor this worker hosts, or the task
// running on this thread. The tags are what node managers search their workers' logs for
// (`yard logs --actor`, `--task`): "[actor <id>" and "[task <id>".
#pragma once

#include <string>
#include <string_view>

namespace yard::detail {

// Once the actor is made: every later line of this process is its.
void set_log_actor(const std::string& id, const std::string& class_name, const std::string& name);

// While a task runs on this thread, its lines are tagged with it; the tag before it comes back
// after (copies, not pointers: calls interleaved on fibers of one thread may tag a line with the
// wrong one of them, never with freed memory).
class TaskLogScope {
 public:
  TaskLogScope(std::string_view task_id, std::string_view function);
  ~TaskLogScope();
  TaskLogScope(const TaskLogScope&) = delete;
  TaskLogScope& operator=(const TaskLogScope&) = delete;

 private:
  std::string outer_id_, outer_function_;
};

// The tag of a line written now on this thread.
std::string log_tag();

}  // namespace yard::detail
