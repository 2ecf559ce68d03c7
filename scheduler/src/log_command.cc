#include "log_command.h"

#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "blocking_client.h"
#include "yard/errors.h"
#include "yard/internal/messaging.h"
#include "yard/internal/session.h"

using json = nlohmann::json;

namespace yard::sched {

namespace {

// The actor's id: the one given, or the one its name (in `ns`, or in the only namespace that
// has it) names among the actors the head knows.
std::string resolve_actor(const json& actors, const LogTarget& t) {
  std::set<std::string> matches;
  for (auto& a : actors) {
    if (a.value("actor_id", "") == t.actor) return t.actor;
    if (a.value("name", "") != t.actor) continue;
    if (!t.name_space.empty() && a.value("namespace", "") != t.name_space) continue;
    matches.insert(a.value("actor_id", ""));
  }
  if (matches.size() == 1) return *matches.begin();
  if (matches.empty())
    throw NotFoundError("no actor '" + t.actor + "'" + (t.name_space.empty() ? "" : " in namespace " + t.name_space) +
                        " (yard status --verbose lists them)");
  std::string ids;
  for (auto& id : matches) ids += (ids.empty() ? "" : ", ") + id;
  throw InvalidArgument("several actors are named '" + t.actor + "' (" + ids +
                        "): say which with --namespace, or give its id");
}

}  // namespace

int print_target_logs(const std::string& address, const std::string& token, const LogTarget& t) {
  auto ep = detail::resolve_endpoint(address, token);
  BlockingClient head(ep.address, ep.token);
  auto r = head.call([](auto env) { env.getBody().setStatus(); }, std::chrono::seconds(30));
  auto status = json::parse(std::string(r->env().getBody().getStatusReply()));
  std::string actor_id;
  try {
    if (!t.actor.empty()) actor_id = resolve_actor(status.value("actors", json::array()), t);
  } catch (const Error& e) {
    std::cerr << "yard: " << e.what() << "\n";
    return 1;
  }
  size_t printed = 0;
  for (auto& n : status.value("nodes", json::array())) {
    if (!n.value("alive", false) || n.value("address", "").empty()) continue;
    std::string node = n.value("node_id", "");
    try {
      BlockingClient c(n.value("address", ""), ep.token);
      auto lines = c.call([&](auto env) {
        auto f = env.getBody().initFindLogLines();
        f.setActorId(actor_id);
        f.setTaskId(t.task);
        f.setMaxLines(t.max_lines);
      });
      std::string text = lines->env().getBody().getStatusReply();
      for (size_t at = 0; at < text.size();) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::cout << node << " " << text.substr(at, end - at) << "\n";
        ++printed;
        at = end + 1;
      }
    } catch (const std::exception& e) {
      std::cerr << "yard: node " << node << ": " << e.what() << "\n";
    }
  }
  if (printed == 0)
    std::cerr << "yard: no lines of " << (actor_id.empty() ? "task " + t.task : "actor " + actor_id)
              << " on the live nodes (its code writes them with yard::log)\n";
  return 0;
}

}  // namespace yard::sched
