// The control store's tables: every record Switchyard keeps in Redis, typed, and the one place
// that reads and writes each of them (resources and bundles: resources.h). One class per table,
// each naming its table of the key schema (yard/internal/keys.h), and with it its durability
// class: whether its writes must survive a failover. Tables holds them all over one StoreLink.
//
//   yard:cluster                 hash    the head's address, session, log dir, start time, head node
//   yard:head, :lease, :standby:* hash, string, strings: the active head, its lease, standbys
//   yard:nodes                   set     node ids
//   yard:node:<id>               hash    role, state, address, hostname, pid, workers, leased...
//   yard:node:<id>:heartbeat     string  with a TTL of the heartbeat timeout
//   yard:nodes:version           counter of joins and leaves
//   yard:counter:job, yard:jobs  counter, list of job ids
//   yard:job:<id>                hash    JobRecord
//   yard:joblog:<id>[:meta]      list, hash: the job's log, its newest 16 MB (size, dropped)
//   yard:actors                  set     actor ids
//   yard:actor:<id>              hash    ActorRecord
//   yard:actor:<id>:spec         string  the creation message (arguments included), for restarts
//   yard:actor_names             hash    namespace/name -> actor id (shown, never read back)
//   yard:pg:<id>                 hash    GroupRecord (found by SCAN: no set to keep)
//   yard:blob:<digest>, yard:blobs string, zset: job binaries and working directories, last use
//   yard:events / :events:log    channel / list of the last 10,000 events
//   yard:timeline:<job>          list of JSON spans (`yard timeline`)
//   yard:curves:<job>            list of JSON points of the job's gauges (the dashboard)
//
// Every function throws ConnectionError when Redis is unreachable. A record that is missing or
// unreadable comes back as nullopt.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/placement.h"
#include "policy/queue.h"
#include "yard/internal/keys.h"
#include "yard/internal/states.h"

namespace yard::sys {
class Redis;
class RedisReply;
}
namespace yard::detail {
using sys::Redis;
}

namespace yard::sched::store {

// The records' states (yard/internal/states.h), with their names ("ALIVE", "RUNNING", ...).
using states::ActorState;
using states::GroupState;
using states::JobStatus;
using states::NodeState;
using states::name;
using states::parse_actor_state;
using states::parse_group_state;
using states::parse_job_status;
using states::parse_node_state;

// A job submitted with a shape (`yard submit --replicas`): its place in the queue and what the
// queue decided.
struct QueueEntry {
  std::string team;
  int priority = 0;
  policy::JobShape shape;
  double queued_at = 0, admitted_at = 0;  // admitted_at 0: waiting
  bool held = false;
  std::vector<std::string> fixed_nodes, replica_nodes;  // where admission put its parts (growth added)
  std::vector<std::string> releasing;  // nodes of replicas asked to leave (still in replica_nodes)
  std::string preempted;               // the latest preemption it gave way to, for `yard jobs` ("" none)
  // Asked to stop (checkpoint and exit) by stop_by: preempted at MIN (then queued again) or at its
  // time limit (then it ends).
  enum class Stop { kNo, kRequeue, kEnd };
  Stop stop = Stop::kNo;
  double stop_by = 0;
  int requeues = 0;                    // times it was stopped and queued again
  double time_limit = 0;               // seconds it may run once admitted (0: no limit)

  // The replicas it may hold now: those given, less those asked to leave.
  int allotted() const { return static_cast<int>(replica_nodes.size()) - static_cast<int>(releasing.size()); }
};

struct JobRecord {
  std::string id, entrypoint, log_path, node, binary, digest, workdir, cwd;
  // Where its actors' and placement groups' names live: the one its driver named, else its own
  // (its id). Empty until its driver registers, and in a record from before namespaces: its id.
  std::string ns;
  bool detached_actors = false;  // its actors that choose no lifetime outlive it (set at registration)
  JobStatus status = JobStatus::kRunning;
  int exit_code = 0;
  double start = 0, end = 0;
  long driver_pid = 0, proc_pid = 0;
  bool submitted = false;  // run by `yard submit` (its process is the node's child)
  std::optional<QueueEntry> queue;
};

struct ActorRecord {
  std::string id, class_name, name, job, address, worker, node, cause, pg;
  std::string ns;  // where its name lives (a record from before namespaces: its job's id)
  std::string owner;  // the actor that made it ("" : a driver or a task); it dies with it unless detached
  ActorState state = ActorState::kPending;
  Res resources;
  int max_restarts = 0;
  uint32_t num_restarts = 0;
  int bundle = -1;        // the bundle of `pg` it runs in
  int place_bundle = -1;  // the bundle it asked for (-1: any with room)
  bool detached = false;
  std::string waiting;    // not stored: while pending, why no running node can hold it (and after
                          // it died of waiting too long); "" otherwise
};

struct GroupRecord {
  std::string id, name, job;
  std::string ns;  // where its name lives (a record from before namespaces: its job's id)
  policy::BundleStrategy strategy = policy::BundleStrategy::kPack;
  GroupState state = GroupState::kPending;
  std::vector<Res> bundles;
  std::vector<std::string> nodes;  // per bundle; "" while unplaced
};

// How a node's lease queue treats a lease no running node can hold (ClusterInfo::lease_settings).
struct LeaseSettings {
  std::string autoscale_types;  // the autoscaler's node types, JSON ("" : no autoscaler)
  bool infeasible_fails = false;
};

// What a node reports about itself with every heartbeat.
struct NodeReport {
  std::string address, hostname, log_dir;
  std::string metrics;  // host:port of its Prometheus endpoint, or ""
  long pid = 0, leased = 0, workers = 0;
  double start_time = 0, now = 0;  // now: the heartbeat's time, the value of its heartbeat key
  uint64_t object_store_limit = 0, object_store_used = 0, spilled_bytes = 0, spilled_objects = 0;
};
// A node's record is written in full at least this often, changed or not (seconds).
constexpr double kFullReportEvery = 30;

// A node as the schedulers see it: its record's address and state, and its resources.
struct NodeResources {
  std::string id, address, hostname;
  std::optional<NodeState> state;
  Res total, avail;
  bool has_avail = false;  // its free-resources hash exists (gone: withdrawn, nothing goes there)
};

// The connection the tables share, and the writes they gather: from gather_writes() on, actor
// writes only gather their commands, write_gathered() sends them all in one round trip (the head
// does, at the end of each turn of its loop, before any answer that turn made leaves), and every
// other command through the link sends them first, in its own round trip, so that what is read
// or written next comes after them. Commands of a failed round trip are kept and sent again (each
// sets what it sets: twice is harmless).
class StoreLink {
 public:
  explicit StoreLink(detail::Redis& r) : r_(r) {}
  void gather_writes() { gather_ = true; }
  // Runs a table's writes now, or, from gather_writes() on, adds them to the gathered ones.
  void write(std::vector<std::vector<std::string>> cmds);
  void write_gathered();
  // The gathered commands, for a caller that sends them ahead of its own in one round trip (the
  // head's reservations); put_back when that round trip failed.
  std::vector<std::vector<std::string>> take_gathered() { return std::exchange(gathered_, {}); }
  void put_back(std::vector<std::vector<std::string>> cmds);

  // Redis's, after the gathered writes.
  sys::RedisReply cmd(const std::vector<std::string>& args);
  std::vector<sys::RedisReply> pipeline(const std::vector<std::vector<std::string>>& cmds);
  std::map<std::string, std::string> hgetall(const std::string& key);
  // The commands in one round trip, in order; throws on a command's error reply (cmd() would).
  void run_all(const std::vector<std::vector<std::string>>& cmds);
  // One `command key(id)` per id, in one pipelined round trip; the replies in order.
  std::vector<sys::RedisReply> each(const std::vector<std::string>& ids, const char* command,
                                    const std::function<std::string(const std::string&)>& key);
  // Appends to a list that keeps its newest `keep` items for a week.
  void append_capped(const std::string& key, const std::vector<std::string>& items, long keep);
  // How many times the connection was made again (a Redis that restarted may have lost records).
  uint64_t reconnects() const;
  const std::string& address() const;

 private:
  // Logs the error replies among the first n.
  void refused(const std::vector<std::vector<std::string>>& cmds, const std::vector<sys::RedisReply>& reps, size_t n);
  detail::Redis& r_;
  bool gather_ = false;
  std::vector<std::vector<std::string>> gathered_;
};

// yard:cluster (the head's address, session, log dir, start time, head node, metrics, dashboard,
// the autoscaler's node types) and yard:demand (each node's waiting leases). The head writes it
// when it starts, nodes with their reports.
class ClusterInfo {
 public:
  static constexpr const keys::Table& kTable = keys::kClusterTable;
  explicit ClusterInfo(StoreLink& s) : s_(s) {}
  void put(const std::string& address, const std::string& session_dir, const std::string& log_dir, double start_time);
  // The node whose manager runs beside the head service.
  void set_head_node(const std::string& id);
  // Where the head serves its Prometheus metrics ("" when it does not).
  void set_head_metrics(const std::string& address);
  // The session directory whose redis.pids lists the control store's servers (a head that takes
  // the cluster over adopts them from there).
  void set_servers_session(const std::string& dir);
  // Where the head serves its dashboard ("http://host:port", or "").
  void set_dashboard(const std::string& url);
  std::map<std::string, std::string> fields();
  // The resources of the autoscaler's node types (JSON array of objects; "" : no autoscaler).
  void set_autoscale_types(const std::string& json);
  // Whether requests no node could hold fail at once ([scheduling] infeasible = "fail") instead
  // of waiting for a node that can.
  void set_infeasible_fails(bool fails);
  // Both, as node managers read them for their lease queues.
  LeaseSettings lease_settings();
  // Task leases waiting at a node for room (JSON [{"need": {...}, "count": n}], with "reason" and
  // "detail" for those no running node can hold; "" : none), and
  // every node's, for the autoscaler.
  void set_lease_demand(const std::string& node, const std::string& json);
  std::map<std::string, std::string> lease_demand();
  // What a node's task leases hold, per job (JSON {"job-1": {"CPU": 2}}, "" : nothing), and every
  // node's: a team's tasks count against its quota as its actors do.
  void set_lease_holdings(const std::string& node, const std::string& json);
  std::map<std::string, std::string> lease_holdings();

 private:
  StoreLink& s_;
};

// Who heads the cluster, as the control store says (the lease itself: head/head_lease.h).
struct ActiveHead {
  std::string address, holder;
  uint64_t epoch = 0;
  bool leased = false;  // its lease has not run out
};

// yard:head, its lease and the standbys' announcements (yard:head:standby:<address>).
class Heads {
 public:
  static constexpr const keys::Table& kTable = keys::kHeadTable;
  explicit Heads(StoreLink& s) : s_(s) {}
  ActiveHead active();
  // A standby's announcement, renewed while it waits; it expires after `ttl` of silence.
  void announce_standby(const std::string& address, std::chrono::milliseconds ttl);
  void withdraw_standby(const std::string& address);
  std::vector<std::string> standbys();

 private:
  StoreLink& s_;
};

// yard:nodes, yard:node:<id>, its heartbeat, yard:nodes:version; each node reports its own.
class Nodes {
 public:
  static constexpr const keys::Table& kTable = keys::kNodeTable;
  explicit Nodes(StoreLink& s) : s_(s) {}
  std::vector<std::string> ids();
  // A node joins: its role and state ALIVE, then its membership.
  void add(const std::string& id, const std::string& role);
  void remove(const std::string& id);
  // Goes up with every join and leave: a cached membership is stale when it changed.
  long long version();
  // The node's record and its heartbeat (which expires after `ttl`). A record's fields are written
  // when they changed since this table last wrote them, all of them after a reconnection, a
  // failed write, and at least every kFullReportEvery; the heartbeat is written every time.
  void report(const std::string& id, const NodeReport& r, std::chrono::milliseconds ttl);
  // Many nodes' records and heartbeats in one pipelined round trip (simulated nodes); for each,
  // whether `key(id)` existed just before (its free-resources hash: gone when declared dead).
  std::vector<bool> report_all(const std::vector<std::pair<std::string, NodeReport>>& reports,
                               std::chrono::milliseconds ttl, const std::function<std::string(const std::string&)>& key);
  bool heartbeating(const std::string& id);
  // The members whose heartbeat has expired (one script run in Redis).
  std::vector<std::string> silent();
  // Each node's last heartbeat (unix time), none when its heartbeat expired: one round trip.
  std::vector<std::optional<double>> last_heartbeats(const std::vector<std::string>& ids);
  void set_state(const std::string& id, NodeState s, double dead_at = 0);
  std::optional<NodeState> state(const std::string& id);
  std::map<std::string, std::string> fields(const std::string& id);
  // Many nodes' records in one pipelined round trip, in the order of `ids`.
  std::vector<std::map<std::string, std::string>> records(const std::vector<std::string>& ids);
  // Task workers the node has leased out (0 when unknown).
  long leased_workers(const std::string& id);
  // Every node with its resources, in one pipelined round trip.
  std::vector<NodeResources> with_resources();
  // These nodes' free resources, none where the hash is gone (withdrawn): one round trip.
  std::vector<std::optional<Res>> free_resources(const std::vector<std::string>& ids);

 private:
  // The commands that report `n`: the changed fields of its record (all of them when it has no
  // record written here that is still trusted), then its heartbeat.
  std::vector<std::vector<std::string>> report_commands(const std::string& id, const NodeReport& n,
                                                        std::chrono::milliseconds ttl);
  struct Reported {
    std::vector<std::string> values;  // the record's fields as last written, in report order
    double full_at = 0;               // its `now` when every field was last written
  };
  StoreLink& s_;
  std::map<std::string, Reported> reported_;  // what was written of each node's record
  uint64_t reported_on_ = 0;                  // the connection (its reconnect count) it was written on
};

// yard:counter:job, yard:jobs, yard:job:<id>.
class Jobs {
 public:
  static constexpr const keys::Table& kTable = keys::kJobTable;
  explicit Jobs(StoreLink& s) : s_(s) {}
  std::string new_id();
  void add(const std::string& id);
  std::vector<std::string> ids();
  void save(const JobRecord& j);
  // Only the queue's fields of a running job (its allotment), leaving what its runner wrote.
  void save_queue(const std::string& id, const QueueEntry& q);
  std::optional<JobRecord> get(const std::string& id);
  std::map<std::string, std::string> fields(const std::string& id);
  // A job with a shape joins the queue: its record, its membership and what it asked to run (the
  // submission, JSON), in one transaction.
  void enqueue(const JobRecord& j, const std::string& submission);
  std::vector<std::string> queued();
  std::optional<std::string> submission(const std::string& id);
  void set_submission(const std::string& id, const std::string& submission);
  // A job that ended leaves the queue (its record stays).
  void leave_queue(const std::string& id);
  // The teams' decayed usage (the queue's fair share) as of `at` (unix seconds), and back.
  struct Usage {
    std::map<std::string, double> teams;
    double at = 0;
  };
  void save_usage(const Usage& u);
  Usage usage();
  // A job's log, kept here as well as in the log directory of the node that runs its program (its
  // newest kLogKeep bytes, for a week after the last write), so that `yard logs` reads it after
  // that node is lost. Chunks are appended in order by that node.
  static constexpr size_t kLogKeep = 16 << 20;
  void append_log(const std::string& id, const std::string& chunk);
  struct Log {
    bool kept = false;  // the store has a log of the job
    std::string data;   // from the offset asked (or the oldest byte kept, when that is later)
    uint64_t from = 0;  // the offset of data's first byte
    uint64_t size = 0;  // bytes the log was given in all
  };
  Log log(const std::string& id, uint64_t offset, size_t max);

 private:
  StoreLink& s_;
};

// yard:actors, yard:actor:<id> and its creation message, yard:actor_names. Its writes are
// gathered while the link gathers (StoreLink::gather_writes).
class Actors {
 public:
  static constexpr const keys::Table& kTable = keys::kActorTable;
  explicit Actors(StoreLink& s) : s_(s) {}
  // A new actor: its membership, its record and (unless empty) the creation message it restarts
  // from, in one round trip.
  void add(const ActorRecord& a, const std::string& spec);
  std::vector<std::string> ids();
  void save(const ActorRecord& a);
  std::optional<ActorRecord> get(const std::string& id);
  std::optional<std::string> spec(const std::string& id);
  void drop_spec(const std::string& id);
  void name(const std::string& name, const std::string& id);
  // The name is free again (its actor is dead).
  void unname(const std::string& name);
  // Forgets actors for good (id, and the name to drop with it or ""), in one round trip.
  void forget(const std::vector<std::pair<std::string, std::string>>& ids_and_names);

 private:
  StoreLink& s_;
};

// yard:pg:<id> (found by SCAN: no set to keep).
class Groups {
 public:
  static constexpr const keys::Table& kTable = keys::kGroupTable;
  explicit Groups(StoreLink& s) : s_(s) {}
  static std::string key(const std::string& id);
  // The HSET arguments (key first) that write the record: for a reservation script that writes
  // it in the same atomic step as it takes the resources.
  static std::vector<std::string> fields_of(const GroupRecord& g);
  void save(const GroupRecord& g);
  std::vector<std::string> ids();
  std::optional<GroupRecord> get(const std::string& id);

 private:
  StoreLink& s_;
};

// yard:blob:<digest> and yard:blobs (digest -> last use, unix seconds): job binaries and working
// directories, kept in the control store (and so on its replicas) so that a head on another
// machine serves what was uploaded to the one before it. Puts are gathered with the turn's writes.
class Blobs {
 public:
  static constexpr const keys::Table& kTable = keys::kBlobTable;
  explicit Blobs(StoreLink& s) : s_(s) {}
  void put(const std::string& digest, const std::string& bytes, double now);
  bool has(const std::string& digest);
  std::optional<std::string> get(const std::string& digest);
  // Notes a use (the blob is kept a while longer).
  void touch(const std::vector<std::string>& digests, double now);
  // Digests last used before `before`.
  std::vector<std::string> unused_since(double before);
  void drop(const std::vector<std::string>& digests);

 private:
  StoreLink& s_;
};

// What happened, kept for a while: task timelines, a job's curves, the cluster's events.
class Journals {
 public:
  // kTimelineTable and kEventTable: both rebuilt, or gaps in a record of the past.
  static constexpr const keys::Table& kTable = keys::kEventTable;
  explicit Journals(StoreLink& s) : s_(s) {}
  // yard:timeline:<job>, batches of spans (tasks, actor calls, leases; each a
  // wire::TimelineBatch in Cap'n Proto bytes) in arrival order, the newest 2,000 kept for a week.
  void append_timeline(const std::string& job, const std::vector<std::string>& spans);
  std::vector<std::string> timeline(const std::string& job);
  // yard:curves:<job>, the values a job's own gauges took over time (JSON points
  // {"name", "tags", "t", "v"}), the newest 20,000 kept for a week: what the dashboard charts.
  void append_curves(const std::string& job, const std::vector<std::string>& points);
  std::vector<std::string> curves(const std::string& job);
  // Published on yard:events, the last 10,000 kept in yard:events:log.
  void publish(const std::string& event_json);

 private:
  StoreLink& s_;
};

// Every table, over one link.
class Tables {
 public:
  explicit Tables(detail::Redis& r)
      : link(r),
        cluster(link),
        heads(link),
        nodes(link),
        jobs(link),
        actors(link),
        groups(link),
        blobs(link),
        journals(link) {}
  Tables(const Tables&) = delete;
  Tables& operator=(const Tables&) = delete;
  StoreLink link;
  ClusterInfo cluster;
  Heads heads;
  Nodes nodes;
  Jobs jobs;
  Actors actors;
  Groups groups;
  Blobs blobs;
  Journals journals;
};

}  // namespace yard::sched::store
