// What the head tells `yard status`, `yard timeline` and the dashboard. A status reads every node's
// record in a few pipelined round trips; a summary (what `yard status` asks for) is counted from
// the head's own state, with rows only for a small cluster, so that it answers at once whatever
// the cluster's size.
#include "head/head_service.h"
#include "head/status_builder.h"

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "resources.h"
#include "store/replication.h"
#include "yard/process.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

// ---- status -----------------------------------------------------------------------------------

namespace {
constexpr size_t kSummaryRows = 20;  // a summary lists nodes and actors up to this many of each
}  // namespace

json HeadService::cluster_json() {
  json c;
  for (auto& [k, v] : tables_->cluster.fields()) c[k] = v;
  c["redis"] = o_.redis_address;
  if (redis_->replicated()) {
    try {
      c["control_store"] = store::replication_status(*redis_, redis_password_);
    } catch (const std::exception& e) {
      c["control_store"] = {{"error", e.what()}};
    }
  }
  c["head_pid"] = getpid();
  c["head_epoch"] = lease_ ? lease_->epoch() : 0;
  try {
    c["standby_heads"] = tables_->heads.standbys();
  } catch (const std::exception& e) {
    c["standby_heads"] = json::array();
  }
  if (autoscaler_) c["autoscaler"] = autoscaler_->status();
  return c;
}

json HeadService::waiting_json() {
  json w = waiting_actors(actors_->all());
  for (auto& g : groups_->waiting()) w.push_back(std::move(g));
  try {
    for (auto& [node, text] : tables_->cluster.lease_demand()) {
      if (nodes_->dead(node) || !nodes_->find(node)) continue;
      auto d = json::parse(text, nullptr, false);
      if (!d.is_array()) continue;
      for (auto& e : d)
        if (e.is_object() && e.contains("reason"))
          w.push_back({{"kind", "tasks"}, {"id", node}, {"what", std::to_string(e.value("count", 0)) + " workers for tasks"},
                       {"job", ""}, {"needs", e["need"]}, {"reason", e["reason"]}, {"detail", e.value("detail", "")},
                       {"text", e.value("text", "")}});
    }
  } catch (const std::exception& e) {
    spdlog::debug("reading the nodes' waiting leases: {}", e.what());
  }
  return w;
}

// Every row: the head's own part copied here, the rest read and assembled by the status builder
// while this loop goes on (status_builder.h).
void HeadService::on_status(Incoming& in) {
  if (!status_builder_)
    status_builder_ = std::make_unique<StatusBuilder>(io_, token_, [this] {
      return std::make_unique<Redis>(sys::RedisEndpoint::parse(o_.redis_address), redis_password_,
                                     std::chrono::seconds(3));
    });
  status_builder_->request(in.routing_id, in.msg->env().getRequestId(), [this] {
    StatusBuilder::Snapshot s;
    s.cluster = cluster_json();
    s.actors = actor_records(actors_->all());
    s.groups = groups_->status();
    s.waiting = waiting_json();
    s.dead = nodes_->dead_ids();
    return s;
  });
}

// Counts from the head's own state: nodes by state, their resources summed, actors and groups by
// state, the newest jobs; every row only while the cluster is small.
void HeadService::on_status_summary(Incoming& in) {
  json j;
  j["cluster"] = cluster_json();
  j["node_counts"] = nodes_->by_state();
  Res total, avail;
  for (auto& [id, n] : nodes_->all())
    if (n.alive) {
      add(total, n.total);
      add(avail, n.avail);
    }
  j["resources_total"] = total;
  j["resources_available"] = avail;
  // Counted, not listed: a summary costs the head nothing per actor or group beyond a count.
  std::map<std::string, int> by_state;
  size_t n_actors = 0, n_groups = 0;
  for (auto& [state_class, n] : actor_counts(actors_->all())) by_state[state_class.first] += n, n_actors += size_t(n);
  auto group_counts = groups_->counts();
  for (auto& [state, n] : group_counts) n_groups += size_t(n);
  j["actor_counts"] = by_state;
  j["placement_group_counts"] = group_counts;
  if (nodes_->all().size() <= kSummaryRows || n_actors <= kSummaryRows) {
    std::map<std::string, json> per_node;
    json actors = actor_rows(actors_->all(), per_node, n_actors <= kSummaryRows);
    if (nodes_->all().size() <= kSummaryRows) j["nodes"] = node_rows(*tables_, per_node, nodes_->dead_ids());
    if (n_actors <= kSummaryRows) j["actors"] = actors;
  }
  if (n_groups <= kSummaryRows) j["placement_groups"] = groups_->status();
  j["waiting"] = waiting_json();
  j["jobs"] = job_rows(*tables_, kSummaryRows);
  j["jobs_total"] = tables_->jobs.ids().size();
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(j.dump());
  io_->reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
