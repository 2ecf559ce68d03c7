// `yard logs --actor NAME|ID [--namespace NS]` and `yard logs --task ID`: the lines an actor's or
// a task's code wrote with yard::log (yard/log.h), gathered from every live node's workers' logs
// (an actor restarted elsewhere has lines on several nodes), oldest first per node.
#pragma once

#include <string>

namespace yard::sched {

struct LogTarget {
  std::string actor, name_space, task;  // an actor (id, or name with its namespace), or a task
  unsigned max_lines = 1000;
};

// Prints the lines; 1 with a message when the actor is unknown or its name is in several
// namespaces and none was given.
int print_target_logs(const std::string& address, const std::string& token, const LogTarget& t);

}  // namespace yard::sched
