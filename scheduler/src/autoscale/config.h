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
//   [node_types.cpu]          # one table per kind of node (needed for an autoscaler; a file given
//                             # with --config alone may leave them out)
//   cpus = 2                  # CPUs each offers
//   gpus = 0
//   resources = { special = 1 }
//   min_nodes = 0
//   max_nodes = 4
//
// The same file holds the job queue's teams and settings (docs/operations.md):
//
//   [queue]
//   starvation_s = 600        # a job queued longer runs at its team's highest priority (0: never)
//   usage_half_life_s = 3600  # how fast a team's past use fades from the fair-share order
//   stop_grace_s = 60         # a job preempted at its MIN has this long to checkpoint and exit
//   min_run_s = 0             # a job runs at least this long before it may be preempted
//
//   [teams.inspection]        # one table per team; with teams, every queued job names one
//   weight = 2                # its share when all are busy, against the other teams' weights
//   max_priority = 10         # the highest priority its jobs may ask for
//   guarantee = { CPU = 4 }   # room it is sure of: lent while it is idle, taken back when needed
//   ceiling = { CPU = 8 }     # the most it may hold, borrowing included
//   max_queued = 20           # the most jobs it may have waiting (0: no cap)
//
// and how requests that no node of the cluster could hold are treated:
//
//   [scheduling]
//   infeasible = "wait"       # they wait for a node that can hold them (a node may join), and
//                             # yard status says why; "fail": they fail at once (InfeasibleError)
//
// Anything else (an unknown key, a wrong type, min_nodes above max_nodes, a type that offers
// nothing) is refused with the file, the key and the reason.
#pragma once

#include <string>
#include <vector>

#include "policy/autoscale.h"
#include "policy/queue.h"
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
    // Seconds before its time limit Slurm warns a node's batch job (sbatch --signal=B:USR1@N); the
    // node then leaves as with `yard drain --deadline N`. 0: no warning.
    double notice_s = 60;
    std::vector<std::string> extra_args;
  } slurm;
  std::vector<policy::TeamQuota> teams;
  double starvation_s = 0;
  double usage_half_life_s = 3600;
  double stop_grace_s = 60;
  double min_run_s = 0;
  bool infeasible_fails = false;  // [scheduling] infeasible = "fail"
};

// `need_node_types`: the file is an autoscaler's (--autoscaler), not only the cluster's (--config).
Result<AutoscaleConfig> parse_autoscale_config(const std::string& text, const std::string& file, bool need_node_types = true);
Result<AutoscaleConfig> read_autoscale_config(const std::string& path, bool need_node_types = true);

}  // namespace yard::sched
