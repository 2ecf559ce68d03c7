// CoreWorker: what every Switchyard process that runs user code has, a driver or a worker. Two
// implementations: Driver (a user program: registers a job with the head, which names the node
// manager that leases it workers) and Worker (a process a node manager started: registers with
// it and runs what is pushed to it). Both own the process's Channel (its I/O loop, which the parts
// reach as a Messenger) and MemoryStore and hold:
//  * the task submitter (task_submitter.h);
//  * the actor submitter (actor_submitter.h);
//  * ownership and borrowing of objects (ownership.h) and the argument resolver both
//    submitters share (arguments.h);
//  * a head client (head_client.h): the job, placement groups, the control store.
// Submitter state lives on the I/O thread only: user threads post work to it, no locks.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "submit/actor_submitter.h"
#include "submit/arguments.h"
#include "head_address.h"
#include "head_client.h"
#include "messenger.h"
#include "objects/memory_store.h"
#include "objects/ownership.h"
#include "execute/task_executor.h"
#include "submit/task_spec.h"
#include "submit/task_submitter.h"
#include "yard/yard.h"

namespace yard::detail {

class CoreWorker {
 public:
  virtual ~CoreWorker() = default;

  Holder submit_task(const std::string& function, std::vector<Arg> args, const TaskOptions& o);
  Holder put(Bytes value);
  Bytes get(const std::string& id, std::chrono::milliseconds timeout);
  std::vector<Bytes> get_all(const std::vector<std::string>& ids, std::chrono::milliseconds timeout);
  std::vector<size_t> wait(const std::vector<std::string>& ids, size_t num, std::chrono::milliseconds t);
  ActorPtr create_actor(const std::string& cls, std::vector<Arg> args, const ActorOptions& o);
  ActorPtr lookup_actor(const std::string& name, const std::string& cls, const std::string& name_space);
  ActorPtr actor_from_id(const std::string& id, const std::string& cls);
  Holder submit_actor_call(const ActorPtr& a, const std::string& method, std::vector<Arg> args,
                           const CallOptions& call);
  void kill_actor(const ActorPtr& a, bool restart);
  HeadClient& head() { return head_client_; }
  const std::string& node_id() const { return node_id_; }
  const std::string& job_id() const { return job_id_; }
  const std::string& name_space() const { return name_space_; }
  const std::string& token() const { return token_; }
  // host:port where this process's I/O loop listens for other processes.
  const std::string& listen_address() const { return io_->address(); }
  void release(const std::string& id, const std::string& owner);
  std::pair<std::string, std::string> export_ref(const Holder& h);
  Holder import_ref(const std::string& id, const std::string& owner);

  // A driver ends its job at the head; both stop the I/O thread.
  virtual void disconnect();

 protected:
  // I/O thread, every 50 ms in drivers and workers alike: waiting timeline spans go to the node;
  // every 500 ms also idle leases go back, idle shared-memory segments are removed and changed
  // metrics are reported.
  void housekeeping();
  // Spans waiting, and with `with_series` the metrics when they changed (every 5 s regardless).
  void report_metrics(bool with_series);
  void flush_metrics();
  void count_submitted(const std::string& cls, const std::string& name);
  void describe_process(wire::MetricsReport::Builder r);
  bool fill_report(wire::MetricsReport::Builder report, bool series, bool force);
  std::string process_label_ = "driver";  // in metrics reports: "driver", or the worker's id
  std::chrono::steady_clock::time_point last_report_{};
  uint64_t ticks_ = 0;
  CoreWorker(std::string token, std::string lease_address, std::string head_address, std::string node_id,
             std::string job_id);
  std::string new_id();
  static std::string id_prefix();
  std::shared_ptr<TaskSpec> make_spec(std::string fn, std::vector<Arg> args);

  std::string token_;
  std::string lease_address_;  // the node manager that leases workers to this process
  HeadAddress head_address_;   // the cluster's head service
  std::string node_id_;
  std::string job_id_;
  // Where this job's names live: its driver's choice, else the job's id (set once registered).
  std::string name_space_;
  std::string id_prefix_;
  std::atomic<uint64_t> id_seq_{0};
  MemoryStore store_;
  Channel io_;  // opened by Driver (its constructor) or Worker (its executor's run())
  Ownership ownership_{store_, io_, token_};
  ArgumentResolver args_{store_, io_, ownership_};
  TaskSubmitter tasks_{store_, io_, args_, token_, lease_address_, job_id_};
  ActorSubmitter actors_{store_, io_, args_, [this](std::string fn, std::vector<Arg> args) {
                           return make_spec(std::move(fn), std::move(args));
                         },
                         token_, head_address_, lease_address_, job_id_, name_space_, node_id_};
  HeadClient head_client_{io_, token_, head_address_, lease_address_, job_id_, name_space_};
};

// A user program connected to a cluster.
class Driver final : public CoreWorker {
 public:
  // Connects to the head at `address` and registers a job. Throws ConnectionError/AuthError.
  // `name_space`: where the job's names live ("": the job's own); `detached_actors`: the job's
  // actors that choose no lifetime outlive it.
  Driver(const std::string& address, const std::string& token, std::chrono::milliseconds timeout,
         const std::string& name_space = {}, bool detached_actors = false);
  ~Driver() override { disconnect(); }
  void disconnect() override;
};

// A worker process: binds, then run() registers with its node manager and serves.
class Worker final : public CoreWorker {
 public:
  explicit Worker(WorkerConfig cfg);
  [[noreturn]] void run();

 private:
  void final_report();
  WorkerConfig cfg_;
  std::unique_ptr<TaskExecutor> executor_;
};

// The process's runtime, or nullptr before init / after shutdown.
CoreWorker* current();

}  // namespace yard::detail
