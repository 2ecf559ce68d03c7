// Taking over after a killed head: the cluster is read back from the control store. Nodes and
// their actors kept running meanwhile; jobs, actors (with their creation messages, for restarts),
// placement groups, names and dead nodes come from their records.
#include "head/head_service.h"

#include <fstream>

#include <spdlog/spdlog.h>

#include "yard/internal/session.h"
#include "yard/process.h"

namespace yard::sched {

using namespace detail;

// A head started where a killed head left its cluster (same address, its Redis still up) takes
// the cluster over instead of starting a new one: the address and pid of that Redis, or nullopt.
std::optional<HeadService::Takeover> HeadService::find_takeover() {
  if (!o_.redis_address.empty() || o_.presence->tied_to_parent() || o_.port == 0) return std::nullopt;
  auto rec = record_for(o_.host + ":" + std::to_string(o_.port));
  if (!rec || !process_dead(rec->pid)) return std::nullopt;
  std::ifstream f(rec->session_dir + "/redis.address");
  std::string addr;
  long rpid = 0;
  if (!(f >> addr >> rpid)) return std::nullopt;
  Takeover t;
  t.redis_address = addr;
  t.redis_pid = static_cast<pid_t>(rpid);
  try {
    auto at = sys::RedisEndpoint::parse(addr);
    t.redis_password = read_token(rec->session_dir + "/redis/password");
    if (std::ifstream cert(rec->session_dir + "/redis/tls.crt"); cert) {
      t.redis_tls_cert.assign(std::istreambuf_iterator<char>(cert), std::istreambuf_iterator<char>());
      sys::trust_redis_tls(addr, t.redis_tls_cert);
    }
    // A Redis whose process still runs is waited for (a large cluster's can be busy for a while,
    // rewriting its log; a replicated one may be failing over): starting a new cluster beside it
    // would lose the old one's state.
    auto running = [&] {
      for (auto& [pid, role] : StoreServers::recorded(rec->session_dir))
        if (pid_alive(pid)) return true;
      return pid_alive(t.redis_pid);
    };
    auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      try {
        Redis probe(at, t.redis_password, std::chrono::seconds(2), std::chrono::seconds(2));
        break;
      } catch (const std::exception& e) {
        if (!running() || Clock::now() > deadline) throw;
        spdlog::warn("the killed head's Redis at {} (pid {}) does not answer yet: {}; waiting for it", addr,
                     t.redis_pid, e.what());
      }
    }
  } catch (const std::exception&) {
    return std::nullopt;  // its Redis is gone too: a new cluster
  }
  o_.session_dir = rec->session_dir;
  return t;
}

void HeadService::rebuild() {
  for (auto& id : tables_->nodes.ids())
    if (tables_->nodes.state(id) == store::NodeState::kDead) nodes_->mark_dead(id);
  nodes_->refresh();
  size_t jobs = jobs_->rebuild();
  actors_->rebuild();
  groups_->rebuild();
  spdlog::warn("rebuilt from Redis: {} running jobs, {} actors", jobs, actors_->all().size());
}

}  // namespace yard::sched
