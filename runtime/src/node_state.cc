#include "yard/node_state.h"

#include <memory>
#include <mutex>

#include "yard/process.h"
#include "yard/redis.h"
#include "yard/yard.h"

namespace yard {

NodeState node_state(const std::string& node_id) {
  static std::mutex mu;
  static std::unique_ptr<sys::Redis> redis;
  std::lock_guard<std::mutex> l(mu);
  if (!redis) {
    auto cs = control_store();
    auto [host, port] = sys::split_address(cs.address);
    redis = std::make_unique<sys::Redis>(host, port, cs.password, std::chrono::seconds(5));
  }
  // The head's node record (scheduler/src/store: yard:node:ID, field "state").
  auto r = redis->cmd({"HGET", "yard:node:" + node_id, "state"});
  if (r.is_nil()) return NodeState::kUnknown;
  auto s = r.str();
  if (s == "ALIVE") return NodeState::kAlive;
  if (s == "DRAINING") return NodeState::kDraining;
  if (s == "DEAD") return NodeState::kDead;
  return NodeState::kUnknown;
}

const char* node_state_name(NodeState s) {
  switch (s) {
    case NodeState::kAlive: return "ALIVE";
    case NodeState::kDraining: return "DRAINING";
    case NodeState::kDead: return "DEAD";
    case NodeState::kUnknown: break;
  }
  return "UNKNOWN";
}

}  // namespace yard
