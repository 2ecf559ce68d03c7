// `yard status` (status_command.cc).
#pragma once

#include <string>

namespace yard::sched {

// Prints the cluster's state; the process's exit status.
int status_command(const std::string& address, const std::string& token, bool as_json, bool verbose);

}  // namespace yard::sched
