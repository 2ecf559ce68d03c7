// A network namespace of its own for a node the local provider starts, so that it is reached as
// another machine would be: a veth pair, the node's end inside the namespace with 10.213.K.2/30
// and a default route through the host's end (10.213.K.1). The namespace is named after the node
// (yard-NODE_ID), so it can be removed by name, after a head takeover too. Root only.
#pragma once

#include <string>

#include "result.h"

namespace yard::sched {

struct NodeNetwork {
  std::string ns;       // the namespace's name
  std::string node_ip;  // the node's address inside it
};

// Makes the namespace and its link; `log` receives the commands' output. The head must listen on
// an address other than loopback (`head_host`), which the namespace reaches through its route.
Result<NodeNetwork> make_node_network(const std::string& node_id, const std::string& head_host, const std::string& log);
// Removes the node's namespace (and its link with it); nothing when there is none.
void remove_node_network(const std::string& node_id, const std::string& log);
std::string node_namespace(const std::string& node_id);

}  // namespace yard::sched
