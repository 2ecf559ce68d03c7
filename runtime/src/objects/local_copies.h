// Node-local copies of borrowed objects: an object of 1 MiB or more fetched from another host is
// fetched once per host. The process that fetched it names itself in a small file,
// /dev/shm/yard-have-<object id> ("<pid> <address>"), while it holds the value; another process
// of the host that needs the object asks that process first (the value then comes through shared
// memory) and its owner only when that fails. The node manager removes the files of processes
// that died.
#pragma once

#include <optional>
#include <string>

namespace yard::detail::local_copies {

// The address of a live process of this host that holds the object; nullopt when none does.
std::optional<std::string> find(const std::string& id);
// This process holds the object; false when another process announced it first.
bool announce(const std::string& id, const std::string& address);
// This process no longer holds it.
void withdraw(const std::string& id);
// The announcements of processes that are gone (the node manager, periodically).
void sweep();

}  // namespace yard::detail::local_copies
