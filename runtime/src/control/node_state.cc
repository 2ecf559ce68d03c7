#include "yard/node_state.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/internal/states.h"

namespace yard {

namespace {
// A node record's state (states.h names them) as the public enum.
NodeState parse_state(const std::string& s) {
  auto st = states::parse_node_state(s);
  if (!st) return NodeState::kUnknown;
  switch (*st) {
    case states::NodeState::kAlive: return NodeState::kAlive;
    case states::NodeState::kDraining: return NodeState::kDraining;
    case states::NodeState::kDead: return NodeState::kDead;
  }
  return NodeState::kUnknown;
}
}  // namespace

NodeState node_state(const std::string& node_id) {
  // The head's node record (field "state").
  auto s = detail::cluster_control()->run([&](detail::Redis& r) -> std::optional<std::string> {
    auto reply = r.cmd({"HGET", keys::node(node_id), "state"});
    if (reply.is_nil()) return std::nullopt;
    return reply.str();
  });
  return s ? parse_state(*s) : NodeState::kUnknown;
}

std::vector<NodeInfo> nodes() {
  return detail::cluster_control()->run([](detail::Redis& r) {
    auto ids = r.cmd({"SMEMBERS", keys::nodes()}).strings();
    std::sort(ids.begin(), ids.end());
    std::vector<std::vector<std::string>> cmds;
    for (auto& id : ids) {
      cmds.push_back({"HMGET", keys::node(id), "address", "hostname", "state"});
      cmds.push_back({"HGETALL", keys::resources_total(id)});
      cmds.push_back({"HGETALL", keys::resources_free(id)});
    }
    auto replies = r.pipeline(cmds);
    auto amounts = [](const std::vector<std::string>& kv) {
      std::map<std::string, double> m;
      for (size_t k = 0; k + 1 < kv.size(); k += 2) m[kv[k]] = std::strtod(kv[k + 1].c_str(), nullptr);
      return m;
    };
    std::vector<NodeInfo> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto f = replies[3 * i].strings();  // absent fields read as ""
      if (f.size() != 3 || (f[0].empty() && f[2].empty())) continue;  // removed meanwhile
      out.push_back({ids[i], f[0], f[1], parse_state(f[2]), amounts(replies[3 * i + 1].strings()),
                     amounts(replies[3 * i + 2].strings())});
    }
    return out;
  });
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
