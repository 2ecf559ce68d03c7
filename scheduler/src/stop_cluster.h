// `yard stop`: the cluster at an address (the head, its node and Redis, and every node that joined
// it, each named as it goes), or one node; what a killed head left on this machine.
#pragma once

#include <string>

namespace yard::sched {

// The process's exit status; what was stopped is printed.
int stop_cluster(const std::string& address, const std::string& token);

}  // namespace yard::sched
