#include "stop_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "blocking_client.h"
#include "head/store_servers.h"
#include "yard/internal/session.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::sched {

using json = nlohmann::json;

namespace {

// True when pid runs the program named `name` (a pid read from a file may have been reused).
bool runs(pid_t pid, const std::string& name) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::string comm;
  std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/comm"), comm);
  return comm == name.substr(0, 15);
}

// The head service is gone (killed): what it left on this machine (its node manager, its Redis)
// is stopped, and the cluster's record removed.
int stop_remains(const detail::ClusterRecord& rec) {
  std::cout << "The head (pid " << rec.pid << ") is gone; stopping what it left\n";
  long node = 0;
  std::ifstream(rec.session_dir + "/head-node.pid") >> node;
  if (runs(static_cast<pid_t>(node), "yard")) {
    detail::terminate(static_cast<pid_t>(node), SIGTERM, std::chrono::seconds(15));
    std::cout << "  stopped the head's node manager (pid " << node << ")\n";
  }
  for (auto& [pid, role] : StoreServers::recorded(rec.session_dir)) {
    if (!runs(pid, "redis-server")) continue;
    detail::terminate(pid, SIGTERM, std::chrono::seconds(5));
    std::cout << "  stopped its Redis " << role << " (pid " << pid << ")\n";
  }
  detail::remove_record(rec);
  return 0;
}

// The nodes that joined the cluster (not the head's own): id and address. nullopt when the
// address is not a head's (a node manager's: `yard stop` then stops that node only).
std::optional<std::vector<std::pair<std::string, std::string>>> joined_nodes(sched::BlockingClient& c) {
  std::vector<std::pair<std::string, std::string>> out;
  try {
    auto r = c.call([](auto env) { env.getBody().setStatus(); });
    auto j = json::parse(std::string(r->env().getBody().getStatusReply()));
    for (auto& n : j["nodes"])
      if (n.value("role", "") != "head" && n.value("alive", false)) out.emplace_back(n["node_id"], n.value("address", ""));
  } catch (const yard::ConnectionError&) {
    throw;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return out;
}

// Waits (up to `limit`) for a node manager to stop answering: kStopped when it has, kAnswers when
// it still answers, kRefused when it refuses the token.
enum class NodeState { kStopped, kAnswers, kRefused };
NodeState wait_silent(sched::BlockingClient& n, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    try {
      n.call([](auto env) { env.getBody().setPing(); }, std::chrono::milliseconds(500));
    } catch (const yard::AuthError&) {
      return NodeState::kRefused;
    } catch (const yard::Error&) {
      return NodeState::kStopped;
    }
    if (std::chrono::steady_clock::now() >= deadline) return NodeState::kAnswers;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// True once a joined node has stopped. The head asked it before stopping, but gives up on an
// answer after a few seconds (a busy machine may not have sent the request yet): a node that
// still answers then is asked here, directly, and waited for up to 15 s.
bool node_stopped(const std::string& address, const std::string& token) {
  sched::BlockingClient n(address, token);
  auto state = wait_silent(n, std::chrono::seconds(2));
  if (state != NodeState::kAnswers) return state == NodeState::kStopped;
  try {
    n.call([](auto env) { env.getBody().setShutdown(); }, std::chrono::seconds(2));
  } catch (const yard::AuthError&) {
    return false;
  } catch (const yard::Error&) {
    return true;  // it stopped while being asked
  }
  return wait_silent(n, std::chrono::seconds(15)) == NodeState::kStopped;
}

}  // namespace

int stop_cluster(const std::string& address, const std::string& token) {
  std::optional<detail::ClusterRecord> rec;
  std::string addr = address;
  if (addr.empty()) {
    if (const char* a = getenv("YARD_ADDRESS"); a && *a) addr = a;
  }
  rec = addr.empty() ? detail::latest_record() : detail::record_for(addr);
  if (!rec && addr.empty()) {
    std::cout << "No running Switchyard cluster found in " << detail::yard_home() << "\n";
    return 0;
  }
  if (rec && rec->pid > 0 && detail::process_dead(rec->pid)) return stop_remains(*rec);
  auto ep = detail::resolve_endpoint(rec ? rec->address : addr, token);
  sched::BlockingClient c(ep.address, ep.token);
  auto nodes = joined_nodes(c);
  c.call([](auto env) { env.getBody().setShutdown(); });
  if (rec && rec->pid > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    // Dead, or a zombie its parent (a supervisor, a test) has not reaped yet.
    while (!detail::process_dead(rec->pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!detail::process_dead(rec->pid)) {
      std::cerr << "yard: the head (pid " << rec->pid << ") did not stop within 20 s\n";
      return 1;
    }
  }
  if (!nodes) {
    std::cout << "Stopped the Switchyard node at " << c.address() << " (it left its cluster)\n";
    return 0;
  }
  std::vector<std::string> stopped, running;
  for (auto& [id, at] : *nodes) (node_stopped(at, ep.token) ? stopped : running).push_back(id + " at " + at);
  std::cout << "Stopped the Switchyard cluster at " << c.address() << ": the head, its node and its Redis";
  if (!stopped.empty()) std::cout << ", and " << stopped.size() << " joined node" << (stopped.size() > 1 ? "s" : "");
  std::cout << "\n";
  for (auto& n : stopped) std::cout << "  stopped node " << n << "\n";
  for (auto& n : running)
    std::cerr << "yard: node " << n << " still answers; it stops by itself once it has not reached the cluster for "
                 "its --head-timeout\n";
  return running.empty() ? 0 : 1;
}

}  // namespace yard::sched
