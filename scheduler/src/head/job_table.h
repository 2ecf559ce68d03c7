// The head's job table: every job's record is in the control store; the ones this head has seen
// are kept here too, with whether they have ended. A job submitted through the head's node, or one
// a killed head knew, is loaded from its record on first use.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "store/tables.h"

namespace yard::sched {

class JobTable {
 public:
  struct Job : store::JobRecord {
    bool ended = false;
  };
  explicit JobTable(store::Tables& tables) : tables_(tables) {}

  // The job, or nullptr when there is no record of it.
  Job* find(const std::string& id);
  // The job read again from its record (another part changed it: the queue, a node).
  Job* reload(const std::string& id);
  // How many jobs there are by status.
  std::map<std::string, int> counts() const;
  bool running(const std::string& id);
  // A new job (a driver started by hand), recorded.
  Job& create(const std::string& entrypoint, const std::string& node);
  void save(const Job& j);
  // Drivers started by hand (on the head's machine) whose process is gone.
  std::vector<Job*> orphaned();
  // The blobs (binaries, working directories) of the jobs that have not ended.
  std::set<std::string> blobs_in_use() const;
  // Jobs started with `yard submit` whose program runs on `node` (as their records say).
  std::vector<Job*> programs_on(const std::string& node);
  // After a takeover: the jobs the records say are running; one whose program or driver is gone
  // ended while there was no head (FAILED). Returns how many still run.
  size_t rebuild();

 private:
  store::Tables& tables_;
  std::map<std::string, Job> jobs_;
};

}  // namespace yard::sched
