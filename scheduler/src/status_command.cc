// `yard status`: the summary the head counts (rows only for a small cluster), every row with
// --verbose, or everything as JSON.
#include "status_command.h"

#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "blocking_client.h"
#include "yard/internal/session.h"

namespace yard::sched {

using json = nlohmann::json;

namespace {

std::string fmt_res(const json& total, const json& avail) {
  std::string out;
  for (auto& [k, v] : total.items()) {
    double t = v.get<double>();
    double a = avail.contains(k) ? avail[k].get<double>() : t;
    if (k == "memory")
      out += fmt::format("{}{}: {:.1f}/{:.1f} GiB", out.empty() ? "" : ", ", k, (t - a) / (1 << 30), t / (1 << 30));
    else
      out += fmt::format("{}{}: {:g}/{:g}", out.empty() ? "" : ", ", k, t - a, t);
  }
  return out;
}

void print_nodes(const json& nodes) {
  for (auto& n : nodes) {
    std::string state = n.value("alive", false) ? (n.value("state", "") == "DRAINING" ? "DRAINING" : "ALIVE") : "DEAD";
    std::cout << fmt::format("  {}  {}  {}  used/total: {}  workers: {}  actors: {}  logs: {}\n", n.value("node_id", ""),
                             n.value("address", ""), state, fmt_res(n["resources_total"], n["resources_available"]),
                             n["workers"].is_number() ? std::to_string(n["workers"].get<int>()) : n.value("workers", std::string("?")),
                             n.contains("actors") ? n["actors"].size() : 0, n.value("log_dir", ""));
    auto mb = [&](const char* k) { return std::atof(n.value(k, std::string("0")).c_str()) / (1 << 20); };
    if (!n.value("metrics", "").empty()) std::cout << "      metrics: " << n.value("metrics", "") << "\n";
    if (n.contains("object_store_limit"))
      std::cout << fmt::format("      objects: {:.0f}/{:.0f} MB in memory, {:.0f} MB spilled ({} objects)\n",
                               mb("object_store_used"), mb("object_store_limit"), mb("spilled_bytes"),
                               n.value("spilled_objects", std::string("0")));
  }
}

// " 'name'", with its namespace when it is not its job's own; "" for an actor without a name.
std::string actor_name(const json& a) {
  std::string name = a.value("name", ""), ns = a.value("namespace", "");
  if (name.empty()) return "";
  return " '" + name + "'" + (ns.empty() || ns == a.value("job", "") ? "" : " in " + ns);
}

void print_actors(const json& actors) {
  for (auto& a : actors)
    std::cout << fmt::format("  {}  {}{}  {}  {}  node {}{}{}\n", a.value("actor_id", ""), a.value("class", ""),
                             actor_name(a), a.value("state", ""),
                             a.value("job", ""), a.value("node", "").empty() ? "-" : a.value("node", ""),
                             a.value("restarts", 0) ? fmt::format("  restarts {}", a.value("restarts", 0)) : "",
                             a.value("death_cause", "").empty() ? "" : "  (" + a.value("death_cause", "") + ")");
}

void print_groups(const json& groups) {
  for (auto& g : groups) {
    std::string bundles;
    for (size_t i = 0; i < g["bundles"].size(); ++i) {
      std::string res;
      for (auto& [k, v] : g["bundles"][i].items()) res += fmt::format("{}{}: {:g}", res.empty() ? "" : ", ", k, v.get<double>());
      std::string node = g["bundle_nodes"][i].get<std::string>();
      bundles += fmt::format("{}[{}] on {}", bundles.empty() ? "" : "  ", res, node.empty() ? "-" : node);
    }
    std::cout << fmt::format("  {}  {}  {}  {}  {}\n", g.value("placement_group_id", ""), g.value("strategy", ""),
                             g.value("state", ""), g.value("job", ""), bundles);
  }
}

// "12 ALIVE, 1 DEAD" from {"ALIVE": 12, "DEAD": 1}, zero counts left out.
std::string counts(const json& c) {
  std::string out;
  for (auto& [k, v] : c.items())
    if (v.get<long>() > 0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", v.get<long>(), k);
  return out.empty() ? "none" : out;
}

std::string standby_list(const json& cluster) {
  std::string out;
  for (auto& a : cluster.value("standby_heads", json::array())) out += (out.empty() ? "" : ", ") + a.get<std::string>();
  return out.empty() ? "none" : out;
}

// A replicated control store: its primary, each replica's state and lag, and the Sentinels.
void print_control_store(const json& s) {
  if (s.contains("error")) {
    std::cout << "\nControl store: " << s.value("error", "") << "\n";
    return;
  }
  size_t answering = 0;
  for (auto& t : s["sentinels"]) answering += t.value("ok", false);
  std::cout << "\nControl store: primary " << s.value("primary", "") << ", " << s["replicas"].size() << " replicas, "
            << answering << "/" << s["sentinels"].size() << " Sentinels answering, failover "
            << (s.value("quorum", false) ? "possible (quorum reachable)" : "NOT possible (no quorum)") << "\n";
  for (auto& r : s["replicas"])
    std::cout << fmt::format("  replica {}  {}  lag {} s, {} bytes behind\n", r.value("address", ""), r.value("state", ""),
                             r.value("lag_s", 0), r.value("bytes_behind", 0));
  for (auto& t : s["sentinels"])
    if (!t.value("ok", false)) std::cout << "  Sentinel " << t.value("address", "") << ": " << t.value("says", "") << "\n";
}

// Node types with their counts, nodes launching and stopping (and why), demand no type can take,
// and a provider's last error.
void print_autoscaler(const json& a) {
  std::cout << "\nAutoscaler (" << a.value("provider", "") << " provider, " << a.value("config", "") << ")\n";
  for (auto& t : a["node_types"]) {
    std::cout << fmt::format("  {:<12} {} running, {} launching (min {}, max {})\n", t.value("name", ""),
                             t.value("running", 0), t.value("launching", 0), t.value("min_nodes", 0), t.value("max_nodes", 0));
    if (t.contains("error"))
      std::cout << fmt::format("    last failure ({} in a row): {}\n", t.value("failures", 0), t.value("error", ""));
  }
  for (auto& n : a["nodes"])
    if (n.value("phase", "") != "UP")
      std::cout << fmt::format("  {} {} ({}) for {:.0f} s: {}\n", n.value("phase", ""), n.value("node_id", ""),
                               n.value("node_type", ""), n.value("for_s", 0.0), n.value("why", ""));
  std::cout << "  pending demand: " << a.value("pending_demand", 0) << "\n";
  for (auto& u : a["unmet"]) std::cout << "  cannot start a node for " << u.value("what", "") << ": " << u.value("why", "") << "\n";
}
// What waits for a node that can hold it, and why: "  actor a-1 (Big) job j-1  for 12 s: infeasible: ..."
void print_waiting(const json& waiting) {
  std::cout << "\nWaiting for nodes that can hold them (" << waiting.size() << ")\n";
  for (auto& w : waiting)
    std::cout << fmt::format("  {} {} ({}){}{}: {}\n", w.value("kind", ""), w.value("id", ""), w.value("what", ""),
                             w.value("job", "").empty() ? "" : " job " + w.value("job", ""),
                             w.contains("for_s") ? fmt::format(" for {:.0f} s", w.value("for_s", 0.0)) : "",
                             w.value("text", ""));
}

}  // namespace

int status_command(const std::string& address, const std::string& token, bool as_json, bool verbose) {
  auto ep = detail::resolve_endpoint(address, token);
  BlockingClient c(ep.address, ep.token);
  bool full = as_json || verbose;
  auto r = c.call([full](auto env) {
    if (full)
      env.getBody().setStatus();
    else
      env.getBody().setStatusSummary();
  });
  auto j = json::parse(std::string(r->env().getBody().getStatusReply()));
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "Cluster " << c.address() << "\n"
            << "  session: " << j["cluster"].value("session_dir", "") << "\n"
            << "  logs:    " << j["cluster"].value("log_dir", "") << "\n"
            << "  redis:   " << j["cluster"].value("redis", "") << "\n"
            << "  head:    active at " << j["cluster"].value("address", c.address()) << ", epoch "
            << j["cluster"].value("head_epoch", 0) << ", standbys: " << standby_list(j["cluster"]) << "\n"
            << (j["cluster"].value("metrics", "").empty() ? "" : "  metrics: " + j["cluster"].value("metrics", "") + "\n");
  if (!full) {
    std::cout << "  nodes:   " << counts(j["node_counts"]) << "\n"
              << "  used/total: " << fmt_res(j["resources_total"], j["resources_available"]) << "\n"
              << "  actors:  " << counts(j["actor_counts"]) << "\n"
              << "  placement groups: " << counts(j["placement_group_counts"]) << "\n";
  }
  if (j["cluster"].contains("control_store")) print_control_store(j["cluster"]["control_store"]);
  if (j["cluster"].contains("autoscaler")) print_autoscaler(j["cluster"]["autoscaler"]);
  bool all_rows = j.contains("nodes") && j.contains("actors");
  if (j.contains("nodes")) {
    std::cout << "\nNodes (" << j["nodes"].size() << ")\n";
    print_nodes(j["nodes"]);
  }
  if (j.contains("actors")) {
    std::cout << "\nActors (" << j["actors"].size() << ")\n";
    print_actors(j["actors"]);
  }
  if (j.contains("placement_groups") && !j["placement_groups"].empty()) {
    std::cout << "\nPlacement groups (" << j["placement_groups"].size() << ")\n";
    print_groups(j["placement_groups"]);
  }
  if (j.contains("waiting") && !j["waiting"].empty()) print_waiting(j["waiting"]);
  std::cout << "\nJobs (" << j.value("jobs_total", j["jobs"].size()) << (full ? "" : ", the newest listed") << ")\n";
  for (auto& jb : j["jobs"])
    std::cout << fmt::format("  {}  {}  {}\n", jb.value("job_id", ""), jb.value("status", ""), jb.value("entrypoint", ""));
  if (!all_rows) std::cout << "\n(a large cluster: yard status --verbose lists every node, actor and group)\n";
  return 0;
}


}  // namespace yard::sched
