#include "yard/allotment.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/yard.h"

namespace yard {

namespace {
std::vector<std::string> node_list(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (auto& n : j)
    if (n.is_string()) out.push_back(n.get<std::string>());
  return out;
}
}  // namespace

std::optional<JobAllotment> job_allotment() {
  std::string job = job_id();
  if (job.empty()) return std::nullopt;
  // The job's record as the head's queue writes it: the nodes of the replicas it was given, and
  // those of the ones asked to leave (still among them until they are gone).
  namespace jf = keys::job_field;
  auto f = detail::cluster_control()->run([&](detail::Redis& r) {
    return r.cmd({"HMGET", keys::job(job), jf::kAdmittedAt, jf::kReplicaNodes, jf::kReleasing, jf::kStop, jf::kStopBy,
                  jf::kPreempted})
        .strings();
  });
  if (f.size() != 6 || std::strtod(f[0].c_str(), nullptr) <= 0) return std::nullopt;  // not admitted by the queue
  JobAllotment a;
  auto given = node_list(f[1]);
  a.release = node_list(f[2]);
  a.nodes = given;
  if (!f[3].empty()) {
    a.stop_by = std::strtod(f[4].c_str(), nullptr);
    a.requeued_after = f[3] == jf::kStopRequeue;
  }
  a.preempted = f[5];
  a.replicas = static_cast<int>(given.size()) - static_cast<int>(a.release.size());
  if (a.replicas < 0) a.replicas = 0;
  return a;
}

}  // namespace yard
