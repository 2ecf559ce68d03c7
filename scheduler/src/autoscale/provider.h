// Node providers: how the autoscaler starts and stops a node. A started node runs
// `yard start --address HEAD --node-id ID --block` with its type's resources and joins the
// cluster as ID; it is stopped through the cluster (drained, then told to stop) and then
// `terminate`d, which makes sure it is gone.
//  * local: a node process on this machine (a child of the head service);
//  * slurm: a batch job on a Slurm cluster (sbatch), cancelled with scancel.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoscale/config.h"
#include "result.h"

namespace yard::sched {

class NodeProvider {
 public:
  virtual ~NodeProvider() = default;
  virtual const char* name() const = 0;
  // Starts a node of `type` that joins as `node_id`. Returns what went wrong when it could not.
  virtual Problem launch(const policy::NodeType& type, const std::string& node_id) = 0;
  // Makes sure the node is gone (it has usually stopped already, asked by the head).
  virtual void terminate(const std::string& node_id) = 0;
  // What a child of this process that ended meant for a node of this provider's.
  struct ChildExit {
    std::string node;
    bool node_ended = false;  // the node's process (or its submission) is gone
    std::string failure;      // set: starting the node failed, and why
  };
  // Nothing blocks: the provider's commands run as children the head reaps and reports here
  // (nullopt: not one of this provider's).
  virtual std::optional<ChildExit> child_exited(pid_t pid, int status) { return std::nullopt; }
};

struct ProviderContext {
  std::string head_address;  // host:port the nodes join
  std::string token;         // given to a node in its environment, never on its command line
  std::string log_dir;       // each node's output: autoscale-ID.out
  double heartbeat_timeout_s = 4;
};

std::unique_ptr<NodeProvider> local_provider(ProviderContext c, AutoscaleConfig::Local l = {});
std::unique_ptr<NodeProvider> slurm_provider(ProviderContext c, AutoscaleConfig::Slurm s);

// The `yard start` arguments of a node of `type` joining as `node_id` (without the program).
std::vector<std::string> node_start_args(const ProviderContext& c, const policy::NodeType& type,
                                         const std::string& node_id);

}  // namespace yard::sched
