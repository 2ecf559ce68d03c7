// The autoscaler's configuration (`yard start --head --autoscaler cluster.toml`):
//
//   provider = "local"        # or "slurm"
//   idle_timeout_s = 60       # a node idle this long is drained and stopped
//   launch_timeout_s = 120    # a node not joined by then counts as a failed start
//
//   [local]                   # provider = "local" only; optional
//   network_namespaces = true # each node in a network namespace of its own (root; the head on
//                             # a non-loopback --host), joined over a veth pair
//
//   [slurm]                   # provider = "slurm" only; all optional
//   partition = "batch"
//   time_limit = "1-00:00:00"
//   extra_args = ["--qos=normal"]
//
//   [node_types.cpu]          # one table per kind of node
//   cpus = 2                  # CPUs each offers
//   gpus = 0
//   resources = { special = 1 }
//   min_nodes = 0
//   max_nodes = 4
//
// Anything else (an unknown key, a wrong type, min_nodes above max_nodes, a type that offers
// nothing) is refused with the file, the key and the reason.
#pragma once

#include <string>
#include <vector>

#include "policy/autoscale.h"
#include "result.h"

namespace yard::sched {

struct AutoscaleConfig {
  std::string file;
  std::string provider = "local";
  double idle_timeout_s = 60;
  double launch_timeout_s = 120;
  std::vector<policy::NodeType> types;
  struct Local {
    bool network_namespaces = false;
  } local;
  struct Slurm {
    std::string partition;
    std::string time_limit;
    std::vector<std::string> extra_args;
  } slurm;
};

Result<AutoscaleConfig> parse_autoscale_config(const std::string& text, const std::string& file);
Result<AutoscaleConfig> read_autoscale_config(const std::string& path);

}  // namespace yard::sched
