#include "autoscale/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched {

namespace {

// Runs a command to its end (output appended to `log`); its exit status, or -1 when it could not
// start. The head's own thread: nothing else reaps this child meanwhile.
int run(const std::vector<std::string>& argv, const std::string& log) {
  sys::SpawnOptions so;
  so.stdout_path = log;
  pid_t pid;
  try {
    pid = sys::spawn(argv, so);
  } catch (const std::exception&) {
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

std::string node_namespace(const std::string& node_id) { return "yard-" + node_id; }

Result<NodeNetwork> make_node_network(const std::string& node_id, const std::string& head_host, const std::string& log) {
  using R = Result<NodeNetwork>;
  if (geteuid() != 0) return R::fail("network namespaces need root (the head runs as uid " + std::to_string(geteuid()) + ")");
  if (head_host.rfind("127.", 0) == 0 || head_host == "localhost" || head_host == "::1")
    return R::fail("the head listens on " + head_host +
                   ", which a node in another network namespace cannot reach: start the head with --host IP");
  auto ip = sys::which("ip");
  if (ip.empty()) return R::fail("the ip command (iproute2) is not on PATH");
  // The first free link number: its host end does not exist yet (a node adopted after a takeover
  // still holds its own).
  int k = 1;
  while (k < 250 && exists("/sys/class/net/ydv" + std::to_string(k) + "h")) ++k;
  if (k >= 250) return R::fail("no free address for another namespaced node (249 in use)");
  std::string sub = "10.213." + std::to_string(k) + ".", host_if = "ydv" + std::to_string(k) + "h",
              node_if = "ydv" + std::to_string(k) + "n", ns = node_namespace(node_id);
  std::vector<std::vector<std::string>> steps{
      {ip, "netns", "add", ns},
      {ip, "link", "add", host_if, "type", "veth", "peer", "name", node_if},
      {ip, "link", "set", node_if, "netns", ns},
      {ip, "addr", "add", sub + "1/30", "dev", host_if},
      {ip, "link", "set", host_if, "up"},
      {ip, "-n", ns, "addr", "add", sub + "2/30", "dev", node_if},
      {ip, "-n", ns, "link", "set", node_if, "up"},
      {ip, "-n", ns, "link", "set", "lo", "up"},
      {ip, "-n", ns, "route", "add", "default", "via", sub + "1"},
  };
  for (auto& s : steps) {
    if (run(s, log) == 0) continue;
    std::string cmd;
    for (auto& w : s) cmd += (cmd.empty() ? "" : " ") + w;
    remove_node_network(node_id, log);
    run({ip, "link", "del", host_if}, log);
    return R::fail("'" + cmd + "' failed (see " + log + ")");
  }
  // Namespaced nodes reach each other through this host.
  std::ofstream("/proc/sys/net/ipv4/ip_forward") << "1\n";
  return R::ok({ns, sub + "2"});
}

void remove_node_network(const std::string& node_id, const std::string& log) {
  auto ns = node_namespace(node_id);
  if (!exists("/run/netns/" + ns)) return;
  auto ip = sys::which("ip");
  if (ip.empty() || run({ip, "netns", "del", ns}, log) != 0)  // its veth pair goes with it
    spdlog::warn("autoscaler: could not remove network namespace {} (see {})", ns, log);
}

}  // namespace yard::sched
