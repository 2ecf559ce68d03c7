// What the node's processes report: their metrics (added up and served with the node's) and the
// spans of the tasks they ran, appended to their job's timeline in the control store with the
// node's own spans (lease waits).
#include <unistd.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
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
    tables_->journals.append_curves(job, points);
  } catch (const std::exception& e) {
    spdlog::warn("job {}: {} curve points lost: {}", job, points.size(), e.what());
  }
}

namespace {

// One process's spans as the control store keeps them: a TimelineBatch, as Cap'n Proto bytes.
std::string batch_bytes(const std::function<void(wire::TimelineBatch::Builder)>& fill) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<wire::TimelineBatch>());
  auto words = capnp::messageToFlatArray(mb);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

}  // namespace

void NodeManager::on_report_metrics(Incoming& in) {
  auto r = in.msg->env().getBody().getReportMetrics();
  if (metrics_) metrics_->reported().report(r.getPid(), in.msg->same_host(), r);
  std::string job = r.getJob();
  if (!job.empty() && r.hasSeries()) record_curves(job, r);
  if (!job.empty() && (r.getEvents().size() > 0 || r.getEventsDropped() > 0)) {
    auto batch = batch_bytes([&](wire::TimelineBatch::Builder b) {
      b.setNode(node_id_);
      b.setWorker(r.getWorker());
      b.setPid(r.getPid());
      b.setEvents(r.getEvents());
      b.setDropped(r.getEventsDropped());
    });
    try {
      tables_->journals.append_timeline(job, {batch});
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} timeline spans lost: {}", job, r.getEvents().size(), e.what());
    }
  }
  reply_.ok(in);
}

void NodeManager::lease_span(const std::string& job, double wait_s, size_t workers) {
  auto dur = static_cast<int64_t>(wait_s * 1e6);
  lease_spans_[job].push_back({now_us() - dur, dur, workers});
}

void NodeManager::flush_lease_spans() {
  for (auto& entry : lease_spans_) {
    const auto& job = entry.first;
    const auto& spans = entry.second;
    auto batch = batch_bytes([&](wire::TimelineBatch::Builder b) {
      b.setNode(node_id_);
      b.setWorker("node manager");
      b.setPid(getpid());
      auto list = b.initEvents(static_cast<unsigned>(spans.size()));
      for (unsigned i = 0; i < spans.size(); ++i) {
        list[i].setName("lease");
        list[i].setKind("lease");
        list[i].setStartUs(spans[i].start_us);
        list[i].setDurUs(spans[i].dur_us);
        list[i].setOk(spans[i].workers > 0);
        list[i].setCount(spans[i].workers);
      }
    });
    try {
      tables_->journals.append_timeline(job, {batch});
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} lease spans lost: {}", job, spans.size(), e.what());
    }
  }
  lease_spans_.clear();
}

}  // namespace yard::sched
