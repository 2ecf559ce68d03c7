// The node's jobs: programs submitted with `yard submit` run here as this node's children (on the
// head's node), and every job whose workers run here is known from its record in the control
// store, with its binary (and working directory) fetched from the head by digest when this node
// lacks them. The runner owns the jobs; a job's end reaches the node through `Ended` (its workers
// and waiting leases here go with it).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/blob_cache.h"
#include "result.h"
#include "store/tables.h"

namespace yard::sched {

class JobRunner {
 public:
  // The cluster's head moved (a standby took over): programs started from now on are told so.
  void head_moved(const std::string& address) { s_.head_address = address; }
  struct Job : store::JobRecord {
    bool ended = false;
    bool runs_here = false;  // its program is this node's child (`yard submit`)
    int startup_failures = 0;
    // How to run its program again, and how many more times it may be (`yard submit --max-retries`).
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;
    int retries_left = 0, attempt = 1;
    int requeues = 0;  // workers here: of the run they were made for (a requeued job's next run is new)
    uint64_t log_shipped = 0;  // bytes of its log here copied into the control store (ship_logs)
    bool log_done = false;     // all of it: the program ended
  };
  struct Setting {
    std::string node_id, session_dir, log_dir, head_address, token;
    bool head_node = false;  // shares the head's machine: runs programs where the driver has them
  };
  // What a submitter asks to run.
  struct Submission {
    std::vector<std::string> argv;
    std::string cwd, workdir;  // workdir: a working directory's digest (uploaded to the head)
    std::map<std::string, std::string> env;
    int max_retries = 0;  // runs again when its process dies by a signal
    std::string id;       // a job the head admitted from its queue (its record exists); "": a new job
    int attempt = 1;      // a requeued job's next attempt (YARD_JOB_ATTEMPT)
  };
  // A program that exited: its job, and whether it is to run again (it died by a signal with
  // retries left) rather than having ended.
  struct Exit {
    std::string job;
    bool rerun = false;
  };
  using Ended = std::function<void(const Job&)>;

  JobRunner(store::Tables& tables, BlobCache& blobs, Setting s, Ended ended)
      : tables_(tables), blobs_(blobs), s_(std::move(s)), ended_(std::move(ended)) {}

  // Starts the program; the job, or why it cannot start.
  Result<const Job*> submit(Submission sub);
  // Asks a program that runs here to stop (SIGTERM to its process group).
  Problem stop(const std::string& id);
  // The head ended a job (its driver finished or died): a program running here is stopped with
  // it, anything else ends now.
  void ended_elsewhere(const std::string& id);
  // A child process exited: the job whose program it was (ended now, or to run again), or nullopt.
  std::optional<Exit> reaped(pid_t pid, int status);
  // Runs a job's program again (after reaped() said so and the head has cleared its last attempt).
  void rerun(const std::string& id);
  // Copies what the programs running here wrote to their logs since the last call into the
  // control store (store::Jobs::append_log), so that their logs outlive this node; every heartbeat.
  void ship_logs();
  // Jobs whose workers run here but whose programs run elsewhere end when their records say so.
  void check_records();
  // Runs k with the job (its binary fetched first when this node lacks it), or with the reason it
  // cannot run here.
  void with_job(const std::string& id, std::function<void(Result<Job*>)> k);
  // A known job that has not ended, or nullptr.
  Job* live(const std::string& id);
  // Stopping the node: every program running here gets SIGTERM; then, after waiting, SIGKILL and
  // the record says stopped.
  void terminate_all();
  bool any_running() const;
  void kill_all();
  // This node was declared dead while it was cut off, and the head has run its programs elsewhere
  // or ended them: they are killed, and their records (another node's now) left alone.
  void abandon_all();

 private:
  std::map<std::string, std::string> submitted_env(const std::string& id);
  // The job's workers here stop and its leases are refused; `status` set: it has ended with it.
  void end(Job& j, std::optional<store::JobStatus> status, int exit_code);
  void save(const Job& j);
  Job* make(const std::string& id, const store::JobRecord& rec, const std::string& binary);
  Problem spawn_program(Job& j);
  // Up to kShipMax bytes of the job's log; true when all it holds was copied.
  bool ship_log(Job& j);
  static constexpr uint64_t kShipMax = 1 << 20;

  store::Tables& tables_;
  BlobCache& blobs_;
  Setting s_;
  Ended ended_;
  std::map<std::string, Job> jobs_;
};

}  // namespace yard::sched
