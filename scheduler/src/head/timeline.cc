#include "head/timeline.h"

#include <map>

#include <capnp/serialize.h>
#include <nlohmann/json.hpp>

#include "wire.capnp.h"

namespace yard::sched {

using nlohmann::json;

namespace {

// The trace's rows: one process per node, one thread per OS process, named once.
struct Rows {
  json& events;
  std::map<std::string, int> nodes;
  std::map<std::pair<int, long>, bool> threads;

  int node(const std::string& id) {
    auto [row, added] = nodes.emplace(id, static_cast<int>(nodes.size()) + 1);
    if (added) events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", row->second}, {"args", {{"name", "node " + id}}}});
    return row->second;
  }
  void thread(int node_row, long pid, const std::string& worker) {
    if (threads[{node_row, pid}]) return;
    threads[{node_row, pid}] = true;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", node_row}, {"tid", pid},
                      {"args", {{"name", worker + " (pid " + std::to_string(pid) + ")"}}}});
  }
};

}  // namespace

std::string chrome_trace(const std::string& job, const std::vector<std::string>& batches) {
  json events = json::array();
  Rows rows{events, {}, {}};
  size_t spans = 0, unreadable = 0;
  uint64_t dropped = 0;
  for (auto& bytes : batches) {
    try {
      if (bytes.size() % sizeof(capnp::word) != 0) throw std::runtime_error("not whole words");
      kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
      memcpy(words.begin(), bytes.data(), bytes.size());
      capnp::FlatArrayMessageReader reader(words);
      auto b = reader.getRoot<wire::TimelineBatch>();
      int node = rows.node(b.getNode());
      long pid = b.getPid();
      rows.thread(node, pid, b.getWorker());
      dropped += b.getDropped();
      for (auto e : b.getEvents()) {
        json args = {{"ok", e.getOk()}, {"node", b.getNode().cStr()}, {"worker", b.getWorker().cStr()}};
        if (std::string(e.getKind()) == "lease") args["workers"] = e.getCount();
        if (std::string(e.getKind()) == "transfer") args["bytes"] = e.getCount();
        events.push_back({{"name", e.getName().cStr()}, {"cat", e.getKind().cStr()}, {"ph", "X"},
                          {"ts", e.getStartUs()}, {"dur", std::max<int64_t>(0, e.getDurUs())},
                          {"pid", node}, {"tid", pid}, {"args", args}});
        ++spans;
      }
    } catch (...) {  // kj::Exception from a damaged batch too
      ++unreadable;
    }
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"job", job}, {"spans", spans}, {"dropped", dropped}, {"unreadable_batches", unreadable}}}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace yard::sched
