// The full `yard status --json` (every node, actor, group and job), built away from the head's I/O
// loop. What only the head knows (its actors, groups, the nodes it declared dead) is copied on the
// loop, which is quick; what the control store holds (every node's record, heartbeat and
// resources, every job's fields) is read over a connection of the builder's own, and the JSON
// assembled, on the builder's thread. Placement, the failure detector and every other request go
// on meanwhile: at 10,000 nodes a full status takes about a second to build, and the dashboard asks
// for one every 2 s. A request that comes while one is being built is answered with that one, so
// any number of dashboards cost one build at a time.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/tables.h"
#include "yard/internal/redis.h"

namespace yard::detail {
class Messenger;
}

namespace yard::sched {

// Every node's row: its record, resources, liveness and the ids of its alive actors (`per_node`);
// three pipelined round trips.
nlohmann::json node_rows(store::Tables& tables, std::map<std::string, nlohmann::json>& per_node,
                         const std::set<std::string>& dead);
// The newest `newest` jobs' rows, oldest first.
nlohmann::json job_rows(store::Tables& tables, size_t newest);

class StatusBuilder {
 public:
  struct Snapshot {
    nlohmann::json cluster, groups, waiting;
    std::vector<store::ActorRecord> actors;
    std::set<std::string> dead;  // the nodes the head declared dead
  };
  using Connect = std::function<std::unique_ptr<detail::Redis>()>;
  StatusBuilder(detail::Messenger& io, const std::string& token, Connect connect)
      : io_(io), token_(token), connect_(std::move(connect)) {}
  ~StatusBuilder();  // waits for the build in progress
  StatusBuilder(const StatusBuilder&) = delete;
  StatusBuilder& operator=(const StatusBuilder&) = delete;

  // Loop thread: answers request `req` of `routing` with the full status. `snapshot` is taken only
  // when no build is in progress; otherwise the request is answered with the one in progress.
  void request(const std::string& routing, uint64_t req, const std::function<Snapshot()>& snapshot);

 private:
  void run();
  std::string build(Snapshot s);  // the JSON text; throws when the control store fails
  void answer(const std::vector<std::pair<std::string, uint64_t>>& to, const std::string& json,
              const std::string& error);

  detail::Messenger& io_;
  const std::string& token_;
  Connect connect_;
  std::unique_ptr<detail::Redis> redis_;  // the builder thread's
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Snapshot> next_;                          // guarded by mu_: the build to make
  std::vector<std::pair<std::string, uint64_t>> waiting_;  // guarded by mu_: answered by it
  bool building_ = false;                                  // guarded by mu_
  bool stop_ = false;                                      // guarded by mu_
  std::thread thread_;                                     // started by the first request
};

}  // namespace yard::sched
