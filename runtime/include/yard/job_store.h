// What a job's libraries keep in the cluster: a rendezvous store for groups that meet (collective
// groups publish their members' addresses there) and checkpoint records (where each named
// checkpointer's latest checkpoint is).
//
// Inside a cluster both live in the cluster's control store, under the job this process works for
// (yard::job_id()): two jobs that name a group or a checkpointer alike never meet. The runtime
// reaches the control store through its own client; its address and credentials never leave the
// runtime, and nothing here hands them out.
//
// Outside a cluster (ranks that are threads of one program, or processes a program starts
// itself), a group meets through a store of the process's own (local_rendezvous) or a Redis of
// the program's own (RendezvousServer, rendezvous_at).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace yard {

// A small key-value store of strings. Thread-safe. Every operation throws yard::Error (a
// ConnectionError when the store cannot be reached) with what it was doing and where; none waits
// but wait().
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Sets `key` to `value`. A value is kept a day at most, so a group that never cleaned up leaves
  // nothing behind for long.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, or nullopt when it is not set.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Those of `keys` that are not set now, in the order given.
  virtual std::vector<std::string> absent(const std::vector<std::string>& keys) = 0;
  // Adds `by` to the integer at `key` (0 when not set) and returns the sum.
  virtual int64_t add(const std::string& key, int64_t by) = 0;
  virtual void erase(const std::string& key) = 0;
  // Erases every key that starts with `prefix`.
  virtual void erase_prefix(const std::string& prefix) = 0;
  // Where the store is, for messages ("job J's rendezvous store in the cluster", "redis at A").
  virtual std::string where() const = 0;

  // Waits until every one of `keys` is set: the keys still not set when `timeout` passed (empty
  // when all came). Polls with a back-off from 0.2 to 10 ms.
  std::vector<std::string> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
};

// This job's rendezvous store in the cluster this process joined (yard::init), its keys in a
// space of their own (`space`: "collective", say). Throws yard::Error when the process is not
// connected to a cluster.
std::shared_ptr<Rendezvous> job_rendezvous(const std::string& space);
// A store of this process alone, for ranks that are threads of one program. Every call returns
// a new, empty store.
std::shared_ptr<Rendezvous> local_rendezvous();
// A store on the Redis server at "host:port" (a RendezvousServer's), for processes of a program
// that runs outside a cluster. Connects on first use.
std::shared_ptr<Rendezvous> rendezvous_at(const std::string& address, const std::string& password = "");

// A redis-server of the program's own on a free loopback port, in a temporary directory and
// without persistence: a rendezvous store for ranks in processes the program starts. Stopped and
// removed when destroyed; it dies with the thread that started it. Throws ConnectionError when it
// does not come up within 10 s.
class RendezvousServer {
 public:
  RendezvousServer();
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  std::string address() const;  // "127.0.0.1:port", for rendezvous_at

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where a named checkpointer's latest complete checkpoint is.
struct CheckpointRecord {
  uint64_t step = 0;
  std::string path;
};
// Records `record` as the latest checkpoint of `name` in this job. Throws yard::Error when the
// process is not connected to a cluster or the record cannot be written.
void record_checkpoint(const std::string& name, const CheckpointRecord& record);
// The latest checkpoint recorded for `name` in this job, or nullopt when none was. Throws as
// record_checkpoint does.
std::optional<CheckpointRecord> latest_checkpoint(const std::string& name);

}  // namespace yard
