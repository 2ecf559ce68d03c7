// The autoscaler in the head (`yard start --head --autoscaler cluster.toml`): every second it
// gathers the demand the running nodes cannot meet (pending actors and placement-group bundles),
// asks the autoscaling policy (policy/autoscale.h) what to start and stop, and carries that out
// through a node provider (provider.h). A node it starts joins as `auto-TYPE-HEX`; a node idle
// past the timeout is drained first (nothing running is lost) and then stopped. A provider that
// fails to start a node is retried with a growing delay (up to a minute) and reported in
// `yard status`. A head that takes over finds the nodes its predecessor started by their ids.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoscale/config.h"
#include "autoscale/provider.h"
#include "head/cluster_nodes.h"
#include "policy/autoscale.h"

namespace yard::sched {

class Autoscaler {
 public:
  struct Context {
    ClusterNodes& nodes;
    std::function<std::vector<policy::Demand>()> demand;         // what waits for room now
    std::function<bool(const std::string& node)> runs_nothing;   // no actor there
    std::function<void(const std::string& node)> drain;          // drain, then stop the node
    std::function<void(const std::string& event_json)> publish;  // on yard:events
  };
  Autoscaler(AutoscaleConfig config, std::unique_ptr<NodeProvider> provider, Context c);

  void tick();
  // A tick when a request started waiting for a node since the last one (the head checks every
  // 50 ms) instead of at the next second.
  void tick_if_poked() {
    if (poked_) tick();
  }
  // Whether a node that holds `need` could be started: the request then waits for it, and the
  // next tick_if_poked() runs a tick so that the node starts at once.
  bool wait_for_node(const Res& need);
  bool wait_for_nodes(const policy::GroupRequest& group);
  // The head stops: the nodes this autoscaler started stop with it (a killed head leaves them
  // for the next one).
  void shutdown();
  // A child of the head ended: true when it was a node this autoscaler started.
  bool child_exited(pid_t pid, int status);
  // Node types, nodes launching and stopping with their reasons, unmet demand, provider errors.
  nlohmann::json status() const;

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kLaunching, kUp, kStopping };
  struct Launched {
    std::string type;
    Phase phase = Phase::kLaunching;
    Clock::time_point since;
    std::string why;
  };
  struct TypeHealth {
    int failures = 0;
    Clock::time_point retry_at{};
    std::string last_error;
  };
  const policy::NodeType* type(const std::string& name) const;
  bool could_hold(const Res& need) const;
  void adopt_running();
  void follow_nodes(Clock::time_point now);
  policy::ScaleInput input(Clock::time_point now);
  void launch(const policy::Launch& l, Clock::time_point now);
  void failed(const std::string& type, const std::string& why, Clock::time_point now);
  void forget(const std::string& node);

  AutoscaleConfig config_;
  std::unique_ptr<NodeProvider> provider_;
  Context c_;
  std::map<std::string, Launched> launched_;  // by node id
  std::map<std::string, Clock::time_point> idle_since_;
  std::map<std::string, TypeHealth> health_;  // by type
  std::vector<policy::Unmet> unmet_;
  size_t pending_ = 0;
  bool adopted_ = false;
  bool poked_ = false;
};

// The node type of an autoscaled node's id ("auto-TYPE-HEX"); none for another node.
std::optional<std::string> autoscaled_type(const std::string& node_id);

}  // namespace yard::sched
