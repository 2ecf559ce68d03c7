#include "head/status_builder.h"

#include <spdlog/spdlog.h>

#include "head/actors.h"
#include "yard/internal/messaging.h"
#include "resources.h"

using json = nlohmann::json;

namespace yard::sched {

using namespace detail;

json node_rows(store::Tables& tables, std::map<std::string, json>& per_node, const std::set<std::string>& dead) {
  auto ids = tables.nodes.ids();
  auto records = tables.nodes.records(ids);
  auto beats = tables.nodes.last_heartbeats(ids);
  std::map<std::string, store::NodeResources> res;
  for (auto& r : tables.nodes.with_resources()) res[r.id] = std::move(r);
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
    n["alive"] = beats[i].has_value() && !dead.count(ids[i]);
    auto a = per_node.find(ids[i]);
    n["actors"] = a == per_node.end() ? json::array() : std::move(a->second);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

json job_rows(store::Tables& tables, size_t newest) {
  auto ids = tables.jobs.ids();
  json jobs = json::array();
  for (size_t i = ids.size() > newest ? ids.size() - newest : 0; i < ids.size(); ++i) {
    json jj;
    jj["job_id"] = ids[i];
    for (auto& [k, v] : tables.jobs.fields(ids[i])) jj[k] = v;
    jobs.push_back(std::move(jj));
  }
  return jobs;
}

StatusBuilder::~StatusBuilder() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatusBuilder::request(const std::string& routing, uint64_t req, const std::function<Snapshot()>& snapshot) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (building_) {  // answered with the build in progress
      waiting_.emplace_back(routing, req);
      return;
    }
    next_ = snapshot();  // what it throws is the request's answer; nothing waits on it
    waiting_.emplace_back(routing, req);
    building_ = true;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

void StatusBuilder::run() {
  for (;;) {
    Snapshot s;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || next_.has_value(); });
      if (stop_) return;
      s = std::move(*next_);
      next_.reset();
    }
    std::string text, error;
    try {
      text = build(std::move(s));
    } catch (const std::exception& e) {
      redis_.reset();  // connected again for the next one
      error = std::string("the control store did not answer while the status was read: ") + e.what() + "; retry";
      spdlog::warn("{}", error);
    }
    std::vector<std::pair<std::string, uint64_t>> to;
    {
      std::lock_guard<std::mutex> l(mu_);
      to.swap(waiting_);
      building_ = false;
    }
    answer(to, text, error);
  }
}

std::string StatusBuilder::build(Snapshot s) {
  if (!redis_) redis_ = connect_();
  store::Tables tables(*redis_);
  json j;
  j["cluster"] = std::move(s.cluster);
  std::map<std::string, json> per_node;
  json actors = json::array();
  for (auto& a : s.actors) actors.push_back(actor_row(a, per_node));
  j["nodes"] = node_rows(tables, per_node, s.dead);
  j["actors"] = std::move(actors);
  j["placement_groups"] = std::move(s.groups);
  j["waiting"] = std::move(s.waiting);
  j["jobs"] = job_rows(tables, static_cast<size_t>(-1));
  return j.dump();
}

void StatusBuilder::answer(const std::vector<std::pair<std::string, uint64_t>>& to, const std::string& json,
                           const std::string& error) {
  for (auto& [routing, req] : to) {
    OutMessage m(token_, req, true);
    if (error.empty())
      m.env().getBody().setStatusReply(json);
    else
      set_error(m.env(), wire::ErrorCode::UNAVAILABLE, error);
    io_.reply(routing, m.finish());
  }
}

}  // namespace yard::sched
