// What every part of the head is handed, made once by the head service: its channel and token,
// how it answers requests, the control store and its tables, the cluster's nodes, and the head's
// own node. A part's Context adds only the other parts it uses.
#pragma once

#include <string>

#include "common/service.h"
#include "head/cluster_nodes.h"
#include "store/tables.h"

namespace yard::sched {

struct HeadWiring {
  detail::Messenger& io;
  const std::string& token;
  const Replies& reply;
  detail::Redis& redis;
  store::Tables& tables;
  ClusterNodes& nodes;
  const std::string& head_node;  // the head's own node: drivers' leases are served there; not drained
};

}  // namespace yard::sched
