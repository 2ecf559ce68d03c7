#include "make_shards.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "yard/railway/shards.h"
#include "yard/railway/sim.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ---- the aligner: one log per call, on the node that holds the log --------------------------------------

class Aligner {
 public:
  std::string node() { return yard::node_id(); }
  // Records (simulates) a train's log here; the log remembers the node it is on.
  std::string record(std::string log_dir, uint64_t seed, double length_km) {
    auto cfg = yard::railway::default_config(seed);
    cfg.length_m = length_km * 1000;
    cfg.max_duration_s = 3600;
    yard::railway::simulate(cfg, log_dir);
    std::ofstream(log_dir + "/NODE") << yard::node_id() << "\n";
    return yard::node_id();
  }
  // Turns a log into shards (aligned: clock alignment and position correction; or not, the
  // baseline); returns the number of windows.
  int64_t align(std::string log_dir, std::string shard_dir, bool aligned) {
    yard::railway::ShardOptions o;
    o.aligned = aligned;
    auto ws = yard::railway::build_windows(log_dir, o);
    return static_cast<int64_t>(yard::railway::write_shards(ws, shard_dir, o).windows);
  }
};
YARD_ACTOR(Aligner, yard::ctor<>, &Aligner::node, &Aligner::record, &Aligner::align);

void make_shards(const std::string& data, int logs, double length_km, bool unaligned) {
  struct Todo {
    std::string log, shards;
  };
  std::vector<Todo> todo;
  std::vector<int> unrecorded;
  for (int i = 0; i < logs; ++i) {
    Todo t{fs::absolute(data + "/log-" + std::to_string(i)).string(),
           fs::absolute(data + (unaligned ? "/unaligned/shards-" : "/shards-") + std::to_string(i)).string()};
    if (fs::exists(t.shards + "/manifest.json")) continue;
    if (!fs::exists(t.log + "/truth.csv")) unrecorded.push_back(static_cast<int>(todo.size()));
    todo.push_back(t);
  }
  if (todo.empty()) return;
  if (!unrecorded.empty()) {
    std::vector<yard::ActorHandle<Aligner>> recorders;
    for (size_t i = 0; i < std::min<size_t>(unrecorded.size(), 4); ++i) recorders.push_back(yard::actor<Aligner>().spread().remote());
    std::vector<yard::ObjectRef<std::string>> done;
    for (size_t i = 0; i < unrecorded.size(); ++i) {
      std::printf("recording %s (simulated)\n", todo[static_cast<size_t>(unrecorded[i])].log.c_str());
      done.push_back(recorders[i % recorders.size()].call(&Aligner::record).remote(todo[static_cast<size_t>(unrecorded[i])].log,
                                                                                     uint64_t(100 + unrecorded[i]), length_km));
    }
    for (auto& d : done) d.get(3600s);
    for (auto& r : recorders) yard::kill(r);
  }
  // Group the logs by the node they are on.
  std::map<std::string, std::vector<const Todo*>> by_node;
  for (auto& t : todo) {
    std::string node;
    std::ifstream(t.log + "/NODE") >> node;
    by_node[node].push_back(&t);
  }
  std::vector<yard::ActorHandle<Aligner>> aligners;
  std::vector<std::pair<const Todo*, yard::ObjectRef<int64_t>>> calls;
  for (auto& [node, ts] : by_node) {
    size_t n = std::min<size_t>(ts.size(), 2), first = aligners.size();
    std::vector<yard::ObjectRef<std::string>> where;
    for (size_t i = 0; i < n; ++i) {
      aligners.push_back(node.empty() ? yard::actor<Aligner>().remote() : yard::actor<Aligner>().node_affinity(node, true).remote());
      where.push_back(aligners.back().call(&Aligner::node).remote());
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      std::string at = *where[i % n].get(600s);
      std::printf("aligning %s on %s%s\n", ts[i]->log.c_str(), at.c_str(),
                  node.empty() || at == node ? "" : (" (the log's node " + node + " is gone)").c_str());
      calls.emplace_back(ts[i], aligners[first + i % n].call(&Aligner::align).remote(ts[i]->log, ts[i]->shards, !unaligned));
    }
  }
  for (auto& [t, n] : calls) std::printf("  %s: %lld windows\n", t->shards.c_str(), static_cast<long long>(*n.get(3600s)));
  for (auto& a : aligners) yard::kill(a);
}
