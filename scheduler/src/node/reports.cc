// What the node's processes report: their metrics (added up and served with the node's) and the
// spans of the tasks they ran, appended to their job's timeline in the control store with the
// node's own spans (lease waits).
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "node/node_manager.h"

namespace yard::sched {

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// A job's own gauges (not the runtime's yard_ ones) become curves: a point whenever a value
// changes.
void NodeManager::record_curves(const std::string& job, wire::MetricsReport::Reader r) {
  std::vector<std::string> points;
  auto& last = curve_values_[job];
  for (auto s : r.getSeries()) {
    std::string name = s.getName();
    if (s.getKind() != 1 || name.rfind("yard_", 0) == 0) continue;
    nlohmann::json tags = nlohmann::json::object();
    for (auto t : s.getTags()) tags[t.getKey().cStr()] = t.getValue().cStr();
    std::string key = name + tags.dump();
    auto it = last.find(key);
    if (it != last.end() && it->second == s.getValue()) continue;
    last[key] = s.getValue();
    points.push_back(nlohmann::json{{"name", name}, {"tags", tags}, {"t", now_us() / 1e6}, {"v", s.getValue()}}.dump());
  }
  try {
    tables_->append_curves(job, points);
  } catch (const std::exception& e) {
    spdlog::warn("job {}: {} curve points lost: {}", job, points.size(), e.what());
  }
}

void NodeManager::on_report_metrics(Incoming& in) {
  auto r = in.msg->env().getBody().getReportMetrics();
  if (metrics_) metrics_->reported().report(r.getPid(), in.msg->same_host(), r);
  std::string job = r.getJob();
  if (!job.empty() && r.hasSeries()) record_curves(job, r);
  if (!job.empty() && (r.getEvents().size() > 0 || r.getEventsDropped() > 0)) {
    std::vector<std::string> spans;
    spans.reserve(r.getEvents().size() + 1);
    for (auto e : r.getEvents())
      spans.push_back(nlohmann::json{{"name", e.getName().cStr()}, {"kind", e.getKind().cStr()}, {"ts", e.getStartUs()},
                                     {"dur", e.getDurUs()}, {"ok", e.getOk()}, {"node", node_id_},
                                     {"worker", r.getWorker().cStr()}, {"pid", r.getPid()}}
                          .dump());
    if (r.getEventsDropped() > 0)
      spans.push_back(nlohmann::json{{"name", "spans dropped"}, {"kind", "dropped"}, {"ts", now_us()}, {"dur", 0},
                                     {"ok", false}, {"node", node_id_}, {"worker", r.getWorker().cStr()},
                                     {"pid", r.getPid()}, {"count", r.getEventsDropped()}}
                          .dump());
    try {
      tables_->append_timeline(job, spans);
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} timeline spans lost: {}", job, spans.size(), e.what());
    }
  }
  reply_.ok(in);
}

void NodeManager::lease_span(const std::string& job, double wait_s, size_t workers) {
  auto dur = static_cast<int64_t>(wait_s * 1e6);
  lease_spans_[job].push_back(nlohmann::json{{"name", "lease"}, {"kind", "lease"}, {"ts", now_us() - dur},
                                             {"dur", dur}, {"ok", workers > 0}, {"node", node_id_},
                                             {"worker", "node manager"}, {"pid", getpid()}, {"workers", workers}}
                                  .dump());
}

void NodeManager::flush_lease_spans() {
  for (auto& [job, spans] : lease_spans_) {
    try {
      tables_->append_timeline(job, spans);
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} lease spans lost: {}", job, spans.size(), e.what());
    }
  }
  lease_spans_.clear();
}

}  // namespace yard::sched
