// How a daemon is known on its machine: where it leaves word of itself for `yard` commands and
// programs (the records of yard/internal/session.h), and whether it, and what it starts (the
// control store's servers, the head's node manager), dies with the process that started it.
// There is one implementation per way a daemon is started, chosen once from how it was started
// (run_daemon) and asked instead of branching on how it was started.
#pragma once

#include <memory>
#include <string>

#include "yard/internal/session.h"

namespace yard::sched {

class Presence {
 public:
  virtual ~Presence() = default;
  // The daemon listens at `rec.address`: it is announced from now on, until withdraw.
  virtual void announce(const detail::ClusterRecord& rec) const = 0;
  virtual void withdraw(const detail::ClusterRecord& rec) const = 0;
  // Started by a program's yard::init(): it, and what it starts, die with that program, and a
  // head never takes over a cluster another head left.
  virtual bool tied_to_parent() const = 0;
};

// `yard start`'s head: its record in $YARD_HOME/clusters/<port>.json and latest.json (the
// cluster `yard` commands find without --address).
std::shared_ptr<const Presence> head_record_presence();
// `yard start --address HEAD`'s node: its record in $YARD_HOME/clusters/<port>.json.
std::shared_ptr<const Presence> node_record_presence();
// The node manager a head starts beside itself: <session>/head-node.pid, where `yard stop` finds
// it when the head service is gone. `tied`: its head was started by yard::init().
std::shared_ptr<const Presence> head_node_presence(bool tied);
// A head started by yard::init(): nothing on disk; the program holds its address.
std::shared_ptr<const Presence> embedded_presence();

}  // namespace yard::sched
