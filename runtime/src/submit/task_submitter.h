// The task submitter: tasks of one resource shape go to workers leased for that shape, pipelined
// once the cluster is saturated (as many per worker as keep it busy for a few milliseconds, so
// short tasks stream and long ones still spread), retried on a lost worker, and idle leases go
// back after 2 s. Leases come from the node manager at `lease_address` (for a
// driver the one the head named, for a worker its own), which may send the request on to a node
// with room (spillback). Tasks with only values as arguments, made one after another, leave
// together: those a turn of the I/O thread sends to one worker travel as one request (CallGroup).
// Its state lives on the I/O thread, but for the tasks made and not yet taken there.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "submit/arguments.h"
#include "messenger.h"
#include "objects/memory_store.h"
#include "submit/task_spec.h"
#include "yard/yard.h"

namespace yard::detail {

// How many tasks of one shape may wait on one worker: one while more workers may still come
// (`saturated` false, or a spillback in flight); once the cluster has no more room, about 5 ms of
// work at the measured service time (`service_us`, 0: not measured yet: 16), at most 1024.
int pipeline_depth(bool saturated, bool spilling, double service_us);

class TaskSubmitter {
 public:
  TaskSubmitter(MemoryStore& store, Messenger& io, ArgumentResolver& args, const std::string& token,
                const std::string& lease_address, const std::string& job_id)
      : store_(store), io_(io), args_(args), token_(token), lease_address_(lease_address), job_id_(job_id) {}

  // Any thread: queues the task once its arguments are resolved.
  void submit(const std::shared_ptr<TaskSpec>& spec, const TaskOptions& o);
  // I/O thread, every 500 ms: workers idle for 2 s whose shape has nothing queued go back.
  void return_idle_leases();

 private:
  struct ShapeSpec {
    TaskOptions options;
    std::map<std::string, double> need;
    std::string key;
  };
  static std::shared_ptr<const ShapeSpec> shape_of(const TaskOptions& o);
  struct Lease {
    std::string worker_id, address;
    int inflight = 0;
    std::string node;  // the node manager that granted it (where it goes back)
    std::string shape;
    bool same_host = false;  // large arguments go through shared memory
    std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_event{};  // its last reply, or a send to it idle
  };
  // Tasks of one resource shape: their queue and the state of leasing workers for them.
  struct Shape {
    std::map<std::string, double> need;
    std::string node_id;
    bool soft = false, spread = false;
    std::string placement_group;
    int bundle_index = -1;
    std::string runtime_env;  // as JSON ("": the job's environment)
    std::deque<std::shared_ptr<TaskSpec>> queue;
    bool lease_in_flight = false, spill_in_flight = false;
    std::chrono::steady_clock::time_point saturated_until{};
    double service_us = 0;  // a task's time on a worker (moving average of reply spacing)
    bool warned = false;    // the log said its tasks wait for a node that can hold them
  };

  // Loop thread: the tasks made since the last time, queued on their shapes and sent.
  void take_submitted();
  void enqueue(const std::shared_ptr<TaskSpec>& spec, const ShapeSpec& shape);
  void pump();
  void waiting_for_node(Shape& sh, const std::string& why);
  // pump() once at the end of the loop's turn: the tasks a group of replies makes room for leave
  // together.
  void pump_soon();
  // A task with an ObjectRef argument (or a large one): a request of its own.
  void send(const std::shared_ptr<TaskSpec>& spec, Lease& w);
  ReplyCallback reply_to(const std::shared_ptr<TaskSpec>& spec, const std::string& wid, const std::string& addr);
  void taken(Lease& w, std::chrono::steady_clock::time_point now);
  void on_reply(const std::shared_ptr<TaskSpec>& spec, const std::string& wid, const std::string& addr,
                std::unique_ptr<InMessage> r, std::optional<LocalError> err);
  void request_lease(const std::string& shape, const std::string& node = {}, bool spilled = false);
  void on_lease(const std::string& key, const std::string& node, bool spilled, std::unique_ptr<InMessage> r,
                std::optional<LocalError> err);
  void fail_queue(Shape& sh, const std::function<void(const std::string&)>& fail);

  MemoryStore& store_;
  Messenger& io_;
  ArgumentResolver& args_;
  const std::string& token_;
  const std::string& lease_address_;
  const std::string& job_id_;
  std::map<std::string, Shape> shapes_;
  std::vector<Lease> leases_;
  bool pump_due_ = false;

  struct Submitted {
    std::shared_ptr<TaskSpec> spec;
    std::shared_ptr<const ShapeSpec> shape;
  };
  std::mutex submit_mu_;
  std::vector<Submitted> submitted_;  // guarded by submit_mu_: made, not yet taken by the loop
};

}  // namespace yard::detail
