// What the head tells `yard status`, `yard timeline` and the dashboard. A status reads every node's
// record in a few pipelined round trips; a summary (what `yard status` asks for) is counted from
// the head's own state, with rows only for a small cluster, so that it answers at once whatever
// the cluster's size.
#include "head/head_service.h"
#include "head/timeline.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "resources.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

// ---- status -----------------------------------------------------------------------------------

void HeadService::on_timeline(Incoming& in) {
  std::string job = in.msg->env().getBody().getTimeline();
  if (job.empty()) {
    auto ids = tables_->job_ids();
    if (ids.empty()) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no jobs yet");
    job = ids.back();
  }
  if (!tables_->job(job)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + job);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setTimelineReply(chrome_trace(job, tables_->timeline(job)));
  io_->reply(in.routing_id, m.finish());
}

// The points of a job's own gauges, oldest first, as one JSON array.
void HeadService::on_job_curves(Incoming& in) {
  std::string job = in.msg->env().getBody().getJobCurves();
  if (!tables_->job(job)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + job);
  std::string out = "[";
  for (auto& p : tables_->curves(job)) out += (out.size() > 1 ? "," : "") + p;
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(out + "]");
  io_->reply(in.routing_id, m.finish());
}

namespace {
constexpr size_t kSummaryRows = 20;  // a summary lists nodes and actors up to this many of each
}  // namespace

json HeadService::cluster_json() {
  json c;
  for (auto& [k, v] : tables_->cluster()) c[k] = v;
  c["redis"] = o_.redis_address;
  c["head_pid"] = getpid();
  if (autoscaler_) c["autoscaler"] = autoscaler_->status();
  return c;
}

// Every node with its record, resources, liveness and actors: three pipelined round trips.
json HeadService::node_rows(std::map<std::string, json>& per_node) {
  auto ids = tables_->node_ids();
  auto records = tables_->node_records(ids);
  auto beats = tables_->last_heartbeats(ids);
  std::map<std::string, store::NodeResources> res;
  for (auto& r : tables_->nodes_with_resources()) res[r.id] = std::move(r);
  json nodes = json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    json n;
    n["node_id"] = ids[i];
    for (auto& [k, v] : records[i])
      if (k.rfind("resources_", 0) != 0) n[k] = v;
    auto r = res.find(ids[i]);
    n["resources_total"] = r == res.end() ? Res{} : r->second.total;
    n["resources_available"] = r == res.end() ? Res{} : r->second.avail;
    if (beats[i]) n["heartbeat"] = std::to_string(*beats[i]);  // what the dashboard shows
    n["alive"] = beats[i].has_value() && !nodes_->dead(ids[i]);
    n["actors"] = per_node.count(ids[i]) ? per_node[ids[i]] : json::array();
    nodes.push_back(n);
  }
  return nodes;
}

json HeadService::job_rows(size_t newest) {
  auto ids = tables_->job_ids();
  json jobs = json::array();
  for (size_t i = ids.size() > newest ? ids.size() - newest : 0; i < ids.size(); ++i) {
    json jj;
    jj["job_id"] = ids[i];
    for (auto& [k, v] : tables_->job_fields(ids[i])) jj[k] = v;
    jobs.push_back(jj);
  }
  return jobs;
}

void HeadService::on_status(Incoming& in) {
  json j;
  j["cluster"] = cluster_json();
  std::map<std::string, json> per_node;
  json actors = actors_->status(per_node, true);
  j["nodes"] = node_rows(per_node);
  j["actors"] = actors;
  j["placement_groups"] = groups_->status();
  j["jobs"] = job_rows(static_cast<size_t>(-1));
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(j.dump());
  io_->reply(in.routing_id, m.finish());
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
  std::map<std::string, int> actor_counts;
  size_t n_actors = 0, n_groups = 0;
  for (auto& [state_class, n] : actors_->counts()) actor_counts[state_class.first] += n, n_actors += size_t(n);
  auto group_counts = groups_->counts();
  for (auto& [state, n] : group_counts) n_groups += size_t(n);
  j["actor_counts"] = actor_counts;
  j["placement_group_counts"] = group_counts;
  if (nodes_->all().size() <= kSummaryRows || n_actors <= kSummaryRows) {
    std::map<std::string, json> per_node;
    json actors = actors_->status(per_node, n_actors <= kSummaryRows);
    if (nodes_->all().size() <= kSummaryRows) j["nodes"] = node_rows(per_node);
    if (n_actors <= kSummaryRows) j["actors"] = actors;
  }
  if (n_groups <= kSummaryRows) j["placement_groups"] = groups_->status();
  j["jobs"] = job_rows(kSummaryRows);
  j["jobs_total"] = tables_->job_ids().size();
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(j.dump());
  io_->reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
