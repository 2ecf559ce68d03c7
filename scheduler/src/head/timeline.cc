#include "head/timeline.h"

#include <map>

#include <nlohmann/json.hpp>

namespace yard::sched {

using nlohmann::json;

std::string chrome_trace(const std::string& job, const std::vector<std::string>& spans) {
  json events = json::array();
  std::map<std::string, int> node_rows;                    // node id -> trace pid
  std::map<std::pair<int, long>, std::string> thread_rows;  // (trace pid, OS pid) -> name
  size_t skipped = 0;
  for (auto& text : spans) {
    auto s = json::parse(text, nullptr, false);
    if (!s.is_object() || !s.contains("ts") || !s.contains("dur") || !s["ts"].is_number() || !s["dur"].is_number()) {
      ++skipped;
      continue;
    }
    std::string node = s.value("node", "?");
    auto [row, added] = node_rows.emplace(node, static_cast<int>(node_rows.size()) + 1);
    if (added)
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", row->second}, {"args", {{"name", "node " + node}}}});
    long os_pid = s.value("pid", 0L);
    auto& thread = thread_rows[{row->second, os_pid}];
    if (thread.empty()) {
      thread = s.value("worker", "?") + " (pid " + std::to_string(os_pid) + ")";
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", row->second}, {"tid", os_pid},
                        {"args", {{"name", thread}}}});
    }
    json args = {{"ok", s.value("ok", true)}, {"node", node}, {"worker", s.value("worker", "")}};
    if (s.contains("workers")) args["workers"] = s["workers"];
    if (s.contains("count")) args["count"] = s["count"];
    events.push_back({{"name", s.value("name", "?")}, {"cat", s.value("kind", "task")}, {"ph", "X"},
                      {"ts", s["ts"]}, {"dur", s["dur"].get<double>() < 0 ? 0 : s["dur"].get<double>()},
                      {"pid", row->second}, {"tid", os_pid}, {"args", args}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"job", job}, {"spans", spans.size() - skipped}, {"unreadable", skipped}}}};
  return doc.dump();
}

}  // namespace yard::sched
