#include <signal.h>
#include <sys/wait.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "autoscale/netns.h"
#include "autoscale/provider.h"
#include "common/service.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::sched {

std::vector<std::string> node_start_args(const ProviderContext& c, const policy::NodeType& type,
                                         const std::string& node_id) {
  std::vector<std::string> args{"start", "--address", c.head_address, "--node-id", node_id, "--block",
                                "--heartbeat-timeout", std::to_string(c.heartbeat_timeout_s)};
  nlohmann::json custom = nlohmann::json::object();
  double cpus = 0;
  int gpus = 0;
  for (auto& [k, v] : type.resources) {
    if (k == "CPU") cpus = v;
    else if (k == "GPU") gpus = static_cast<int>(v);
    else custom[k] = v;
  }
  // A node without CPUs in its type offers none (0 would mean "all of this machine's").
  args.insert(args.end(), {"--num-cpus", cpus > 0 ? std::to_string(cpus) : "0.000001"});
  args.insert(args.end(), {"--num-gpus", std::to_string(gpus)});
  if (!custom.empty()) args.insert(args.end(), {"--resources", custom.dump()});
  return args;
}

namespace {

// Node processes on this machine, children of the head service; with network_namespaces, each in
// a network namespace of its own (netns.h).
class LocalProvider final : public NodeProvider {
 public:
  LocalProvider(ProviderContext c, AutoscaleConfig::Local l) : c_(std::move(c)), l_(l) {}
  const char* name() const override { return "local"; }

  Problem launch(const policy::NodeType& type, const std::string& node_id) override {
    auto args = node_start_args(c_, type, node_id);
    args.insert(args.begin(), sys::self_exe());
    sys::SpawnOptions so;
    so.env["YARD_TOKEN"] = c_.token;
    if (l_.network_namespaces) {
      auto net = make_node_network(node_id, sys::split_address(c_.head_address).first, netns_log());
      if (!net) return "network namespace: " + net.why();
      args.insert(args.end(), {"--host", net.value().node_ip});
      args.insert(args.begin(), {sys::which("ip"), "netns", "exec", net.value().ns});
      so.env["YARD_HOST_ID"] = net.value().ns;  // another machine: nothing goes through this one's /dev/shm
    }
    so.stdout_path = c_.log_dir + "/autoscale-" + node_id + ".out";
    so.new_process_group = true;  // not stopped by a signal meant for the head
    try {
      pids_[node_id] = sys::spawn(args, so);
    } catch (const std::exception& e) {
      return std::string("cannot start a node process: ") + e.what();
    }
    return std::nullopt;
  }

  void terminate(const std::string& node_id) override {
    // A namespace's name goes now; the namespace itself (and its link) when the node has exited.
    if (l_.network_namespaces) remove_node_network(node_id, netns_log());
    auto it = pids_.find(node_id);
    if (it == pids_.end()) return;
    ::kill(it->second, SIGTERM);  // reaped by the head, which then calls child_exited
  }

  std::optional<ChildExit> child_exited(pid_t pid, int status) override {
    for (auto it = pids_.begin(); it != pids_.end(); ++it)
      if (it->second == pid) {
        if (l_.network_namespaces) remove_node_network(it->first, netns_log());
        ChildExit e{it->first, true, "node process " + describe_exit(status) + " (see autoscale-" + it->first + ".out)"};
        pids_.erase(it);
        return e;
      }
    return std::nullopt;
  }

 private:
  std::string netns_log() const { return c_.log_dir + "/autoscale-netns.out"; }

  ProviderContext c_;
  AutoscaleConfig::Local l_;
  std::map<std::string, pid_t> pids_;
};

// Quotes one word for /bin/sh.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// A node is a Slurm batch job named after it that runs `yard start ... --block` on its
// allocation; sbatch passes the environment (the token with it) to the job.
class SlurmProvider final : public NodeProvider {
 public:
  SlurmProvider(ProviderContext c, AutoscaleConfig::Slurm s)
      : c_(std::move(c)), s_(std::move(s)), log_(c_.log_dir + "/autoscale-slurm.out") {}
  const char* name() const override { return "slurm"; }

  Problem launch(const policy::NodeType& type, const std::string& node_id) override {
    std::vector<std::string> argv{sys::which("sbatch"), "--parsable", "--job-name", node_id,
                                  "--output", c_.log_dir + "/autoscale-" + node_id + ".out"};
    auto notice = static_cast<long>(s_.notice_s);
    if (notice > 0) argv.push_back("--signal=B:USR1@" + std::to_string(notice));
    if (argv[0].empty()) return std::string("sbatch is not on PATH (is Slurm installed here?)");
    auto cpus = type.resources.find("CPU");
    if (cpus != type.resources.end())
      argv.push_back("--cpus-per-task=" + std::to_string(std::max(1L, static_cast<long>(cpus->second + 0.999))));
    if (!s_.partition.empty()) argv.insert(argv.end(), {"--partition", s_.partition});
    if (!s_.time_limit.empty()) argv.insert(argv.end(), {"--time", s_.time_limit});
    argv.insert(argv.end(), s_.extra_args.begin(), s_.extra_args.end());
    argv.insert(argv.end(), {"--wrap", batch_script(type, node_id, notice)});
    return start(argv, node_id, "sbatch");
  }

  // A submission still running is stopped; the job, if any, is cancelled by name.
  void terminate(const std::string& node_id) override {
    for (auto& [pid, r] : running_)
      if (r.node == node_id && r.what == "sbatch") ::kill(pid, SIGKILL);
    auto scancel = sys::which("scancel");
    if (!scancel.empty()) (void)start({scancel, "--name", node_id}, "", "scancel");
  }

  std::optional<ChildExit> child_exited(pid_t pid, int status) override {
    auto it = running_.find(pid);
    if (it == running_.end()) return std::nullopt;
    auto r = std::move(it->second);
    running_.erase(it);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && r.what == "scancel") spdlog::warn("autoscaler: scancel {}", describe_exit(status));
    if (r.what != "sbatch" || ok) return ChildExit{r.node, false, ""};  // a submitted job joins later
    return ChildExit{r.node, true, "sbatch " + describe_exit(status) + " (see " + log_ + ")"};
  }

 private:
  struct Running {
    std::string node, what;
  };
  // The node in the background of the batch shell, which Slurm's warning (USR1, `notice` seconds
  // before the job's end) makes run `yard drain NODE --deadline notice`: the node's replicas leave
  // and its jobs checkpoint before Slurm ends it. The shell waits for the node again after the trap.
  std::string batch_script(const policy::NodeType& type, const std::string& node_id, long notice) const {
    std::string yard = sh_quote(sys::self_exe());
    std::string node = yard;
    for (auto& a : node_start_args(c_, type, node_id)) node += " " + sh_quote(a);
    if (notice <= 0) return node;
    std::string drain = yard + " drain " + sh_quote(node_id) + " --deadline " + std::to_string(notice) + " --address " +
                        sh_quote(c_.head_address);
    return "trap " + sh_quote("echo 'yard: Slurm ends this node in " + std::to_string(notice) + " s: draining it'; " + drain) +
           " USR1; " + node + " & n=$!; while kill -0 $n 2>/dev/null; do wait $n; done";
  }

  // Starts a Slurm command; the head reaps it and child_exited says how it went.
  Problem start(const std::vector<std::string>& argv, const std::string& node, const std::string& what) {
    sys::SpawnOptions so;
    so.env["YARD_TOKEN"] = c_.token;
    so.stdout_path = log_;
    try {
      running_[sys::spawn(argv, so)] = {node, what};
    } catch (const std::exception& e) {
      return what + ": " + e.what();
    }
    return std::nullopt;
  }

  ProviderContext c_;
  AutoscaleConfig::Slurm s_;
  std::string log_;
  std::map<pid_t, Running> running_;
};

}  // namespace

std::unique_ptr<NodeProvider> local_provider(ProviderContext c, AutoscaleConfig::Local l) {
  return std::make_unique<LocalProvider>(std::move(c), l);
}
std::unique_ptr<NodeProvider> slurm_provider(ProviderContext c, AutoscaleConfig::Slurm s) {
  return std::make_unique<SlurmProvider>(std::move(c), std::move(s));
}

}  // namespace yard::sched
