#include "make_shards.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "yard/railway/shards.h"
#include "yard/railway/sim.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace railway_train {

// ---- the aligner: one log per call, on the node that holds the log --------------------------------------

class Aligner {
 public:
  std::string node() { return yard::node_id(); }
  int pid() { return getpid(); }
  // Records (simulates) a train's log into log_dir, complete or not at all: it is written beside
  // it and renamed. The log remembers its settings and the node it is on.
  std::string record(std::string log_dir, uint64_t seed, double length_km) {
    std::string tmp = log_dir + ".partial";
    fs::remove_all(tmp);
    auto cfg = yard::railway::default_config(seed);
    cfg.length_m = length_km * 1000;
    cfg.max_duration_s = 3600;
    yard::railway::simulate(cfg, tmp);
    std::ofstream(tmp + "/NODE") << yard::node_id() << "\n";
    std::ofstream(tmp + "/RECORDED.json")
        << nlohmann::json{{"seed", seed}, {"length_km", length_km}, {"simulator_version", yard::railway::kSimulatorVersion}}
               .dump()
        << "\n";
    fs::remove_all(log_dir);
    fs::rename(tmp, log_dir);
    return yard::node_id();
  }
  // Turns a log into shards (aligned: clock alignment and position correction; or not, the
  // baseline), complete or not at all; returns the number of windows.
  int64_t align(std::string log_dir, std::string shard_dir, bool aligned) {
    yard::railway::ShardOptions o;
    o.aligned = aligned;
    auto ws = yard::railway::build_windows(log_dir, o);
    std::string tmp = shard_dir + ".partial";
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    auto n = static_cast<int64_t>(yard::railway::write_shards(ws, tmp, o).windows);
    fs::remove_all(shard_dir);
    fs::rename(tmp, shard_dir);
    return n;
  }
};

}  // namespace railway_train

YARD_ACTOR(railway_train::Aligner, yard::ctor<>, &railway_train::Aligner::node, &railway_train::Aligner::pid,
           &railway_train::Aligner::record, &railway_train::Aligner::align);

namespace railway_train {

namespace {

constexpr int kAttempts = 4;  // a call and up to three more when its aligner is lost

struct Todo {
  int index = 0;
  std::string log, shards;
};

uint64_t log_seed(int i) { return uint64_t(100 + i); }

std::string fmt_km(double km) { return fmt::format("{:g}", km); }

// A log made before: with the settings asked for, or an error saying what differs. A log an
// older simulator made is made again (removed here, recorded with the missing ones): a simulated
// log is reproducible, and an older one's labels or signals differ.
void check_recorded(const Todo& t, double length_km) {
  auto again = [&](const std::string& why) {
    std::printf("%s %s: recording it again\n", t.log.c_str(), why.c_str());
    auto data = fs::path(t.log).parent_path();
    auto n = std::to_string(t.index);
    fs::remove_all(t.log);
    fs::remove_all(data / ("shards-" + n));  // both kinds came from the old log
    fs::remove_all(data / "unaligned" / ("shards-" + n));
  };
  std::ifstream in(t.log + "/RECORDED.json");
  if (!in) return again("was made by an earlier version (no RECORDED.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(t.log + "/RECORDED.json is not valid JSON: remove " + t.log + " to record it again");
  }
  if (int v = j.value("simulator_version", 1); v < yard::railway::kSimulatorVersion)
    return again("was recorded by an older simulator (version " + std::to_string(v) + ", this is " +
                 std::to_string(yard::railway::kSimulatorVersion) + ")");
  double km = j.value("length_km", 0.0);
  if (std::abs(km - length_km) > 1e-9 || j.value("seed", uint64_t(0)) != log_seed(t.index))
    throw std::runtime_error(t.log + " was recorded with --length-km " + fmt_km(km) + " (seed " +
                             std::to_string(j.value("seed", uint64_t(0))) + "), this run asks for --length-km " +
                             fmt_km(length_km) + ": pass another --data, or remove " + t.log +
                             " and its shards to record it again");
}

// Gets a call's result; when the actor's process was lost under it (the actor restarts), reports
// the loss and makes the call again on the restarted actor.
template <class T, class Again>
T get_retrying(yard::ObjectRef<T> ref, Again again, Phase phase, const std::string& what, int pid,
               const RecoveryReport& report) {
  for (int attempt = 1;; ++attempt) {
    try {
      return *ref.get(3600s);
    } catch (const yard::ActorDied& e) {
      if (attempt >= kAttempts) throw;
      auto t0 = std::chrono::steady_clock::now();
      Recovery r;
      r.phase = phase;
      r.lost = "aligner (pid " + std::to_string(pid) + ")";
      r.error = e.what();
      std::tie(ref, pid) = again();
      r.redone = what + " again (attempt " + std::to_string(attempt + 1) + ", pid " + std::to_string(pid) + ")";
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report(r);
    }
  }
}

void record_missing(std::vector<Todo>& todo, double length_km, const RecoveryReport& report) {
  std::vector<const Todo*> missing;
  for (auto& t : todo)
    if (!fs::exists(t.log + "/truth.csv")) missing.push_back(&t);
  if (missing.empty()) return;
  std::vector<yard::ActorHandle<Aligner>> recorders;
  for (size_t i = 0; i < std::min<size_t>(missing.size(), 4); ++i)
    recorders.push_back(yard::actor<Aligner>().spread().max_restarts(kAttempts - 1).remote());
  struct Call {
    const Todo* t;
    yard::ActorHandle<Aligner> a;
    int pid;
    yard::ObjectRef<std::string> done;
  };
  std::vector<Call> calls;
  for (size_t i = 0; i < missing.size(); ++i) {
    Call c{missing[i], recorders[i % recorders.size()], 0, {}};
    c.pid = ask(c.a, &Aligner::pid);
    std::printf("recording %s (simulated) in aligner pid %d\n", c.t->log.c_str(), c.pid);
    std::fflush(stdout);
    c.done = c.a.call(&Aligner::record).remote(c.t->log, log_seed(c.t->index), length_km);
    calls.push_back(std::move(c));
  }
  for (auto& c : calls) {
    auto again = [&c, length_km] {
      int pid = ask(c.a, &Aligner::pid);
      return std::pair{c.a.call(&Aligner::record).remote(c.t->log, log_seed(c.t->index), length_km), pid};
    };
    get_retrying(c.done, again, Phase::kRecording, c.t->log + " recorded", c.pid, report);
  }
  for (auto& r : recorders) yard::kill(r);
}

// Shards made completely by this version (older ones are made again from their log).
bool shards_current(const std::string& dir) {
  std::ifstream in(dir + "/manifest.json");
  if (!in) return false;
  int version = 1;
  try {
    version = nlohmann::json::parse(in).value("version", 1);
  } catch (const nlohmann::json::exception&) {
    version = 0;
  }
  if (version == static_cast<int>(yard::railway::kShardVersion)) return true;
  std::printf("%s was made by another version (shard version %d, this is %u): making it again\n", dir.c_str(), version,
              yard::railway::kShardVersion);
  return false;
}

void align_missing(const std::vector<Todo>& todo, bool aligned, const RecoveryReport& report) {
  // Group the logs by the node they are on; up to two aligners per node.
  std::map<std::string, std::vector<const Todo*>> by_node;
  for (auto& t : todo) {
    if (shards_current(t.shards)) continue;
    std::string node;
    std::ifstream(t.log + "/NODE") >> node;
    by_node[node].push_back(&t);
  }
  struct Call {
    const Todo* t;
    yard::ActorHandle<Aligner> a;
    int pid;
    yard::ObjectRef<int64_t> windows;
  };
  std::vector<yard::ActorHandle<Aligner>> aligners;
  std::vector<Call> calls;
  for (auto& [node, ts] : by_node) {
    size_t n = std::min<size_t>(ts.size(), 2), first = aligners.size();
    for (size_t i = 0; i < n; ++i) {
      auto make = yard::actor<Aligner>().max_restarts(kAttempts - 1);
      aligners.push_back(node.empty() ? make.remote() : make.node_affinity(node, true).remote());
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      Call c{ts[i], aligners[first + i % n], 0, {}};
      std::string at = ask(c.a, &Aligner::node);
      c.pid = ask(c.a, &Aligner::pid);
      std::printf("aligning %s on %s in aligner pid %d%s\n", c.t->log.c_str(), at.c_str(), c.pid,
                  node.empty() || at == node ? "" : (" (the log's node " + node + " is gone)").c_str());
      std::fflush(stdout);
      c.windows = c.a.call(&Aligner::align).remote(c.t->log, c.t->shards, aligned);
      calls.push_back(std::move(c));
    }
  }
  for (auto& c : calls) {
    auto again = [&c, aligned] {
      int pid = ask(c.a, &Aligner::pid);
      return std::pair{c.a.call(&Aligner::align).remote(c.t->log, c.t->shards, aligned), pid};
    };
    auto n = get_retrying(c.windows, again, Phase::kAligning, c.t->log + " aligned", c.pid, report);
    std::printf("  %s: %lld windows\n", c.t->shards.c_str(), static_cast<long long>(n));
  }
  for (auto& a : aligners) yard::kill(a);
}

}  // namespace

std::vector<std::string> make_shards(const DataSpec& spec, const RecoveryReport& report) {
  std::vector<Todo> todo;
  for (int i = 0; i < spec.logs; ++i) {
    Todo t{i, fs::absolute(spec.dir + "/log-" + std::to_string(i)).string(),
           fs::absolute(spec.dir + (spec.unaligned ? "/unaligned/shards-" : "/shards-") + std::to_string(i)).string()};
    if (fs::exists(t.log + "/truth.csv")) check_recorded(t, spec.length_km);
    todo.push_back(t);
  }
  int more = 0;
  while (fs::exists(spec.dir + "/log-" + std::to_string(spec.logs + more))) ++more;
  if (more > 0)
    std::printf("using %d of the %d logs in %s (--logs %d)\n", spec.logs, spec.logs + more, spec.dir.c_str(), spec.logs);
  record_missing(todo, spec.length_km, report);
  align_missing(todo, !spec.unaligned, report);
  std::vector<std::string> dirs;
  for (auto& t : todo) dirs.push_back(t.shards);
  return dirs;
}

}  // namespace railway_train
