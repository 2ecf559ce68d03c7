// The control store's key schema: every key any part of Switchyard reads or writes in Redis is
// built here, table by table, and each table says what losing it costs (its durability class),
// so that a replicated control store can acknowledge the writes that must survive a failover and
// let the others go.
//
// Part of the internal header set (yard/internal/): for the daemons, the CLI, the fuzzers and the
// tests; not installed.
#pragma once

#include <string>
#include <string_view>

namespace yard::keys {

// What losing a table's writes in a failover costs.
enum class Durability {
  // Rebuilt by its writers within a heartbeat or a turn (heartbeats, demand, events, availability
  // recomputed from the records): may be lost.
  kRebuilt,
  // The cluster's records (jobs, actors, placement groups, nodes, checkpoint records): must
  // survive a failover.
  kDurable,
};

// One table of the schema: its name in messages and its durability class.
struct Table {
  std::string_view name;
  Durability durability;
};

// ---- the cluster -------------------------------------------------------------------------------
inline constexpr Table kClusterTable{"cluster", Durability::kDurable};
inline std::string cluster() { return "yard:cluster"; }  // hash: the cluster's identity and epoch

// ---- the active head: its lease, and the epoch that fences heads before it ---------------------
// yard:head (hash: epoch, address, holder, since) names the head that holds the lease; the lease
// (a string: the holder, with a TTL) is renewed by it; each new holder raises the epoch.
// yard:head:standby:<address> (a string with a TTL) announces a standby head.
inline constexpr Table kHeadTable{"heads", Durability::kDurable};
inline std::string head() { return "yard:head"; }
inline std::string head_lease() { return "yard:head:lease"; }
inline constexpr std::string_view kStandbyPrefix = "yard:head:standby:";
inline std::string head_standby(std::string_view address) { return std::string(kStandbyPrefix) + std::string(address); }

// ---- nodes: yard:nodes (set of ids), yard:node:ID (hash), its heartbeat and version -------------
inline constexpr Table kNodeTable{"nodes", Durability::kDurable};
inline constexpr Table kHeartbeatTable{"heartbeats", Durability::kRebuilt};
inline std::string nodes() { return "yard:nodes"; }
inline std::string nodes_version() { return "yard:nodes:version"; }
inline std::string node(std::string_view id) { return "yard:node:" + std::string(id); }
inline std::string heartbeat(std::string_view node_id) { return node(node_id) + ":heartbeat"; }

// ---- resources: a node's totals and what is free (rebuilt from the actors and leases) ----------
inline constexpr Table kResourceTable{"resources", Durability::kRebuilt};
inline constexpr std::string_view kResourcePrefix = "yard:res:";
inline std::string resources_total(std::string_view node_id) { return std::string(kResourcePrefix) + std::string(node_id) + ":total"; }
inline std::string resources_free(std::string_view node_id) { return std::string(kResourcePrefix) + std::string(node_id) + ":avail"; }
// What waits for resources, per node (each node manager rewrites its own line every report).
inline constexpr Table kDemandTable{"demand", Durability::kRebuilt};
inline std::string demand() { return "yard:demand"; }
// What task leases hold, per node and job (each node manager rewrites its own line when it changes).
inline constexpr Table kHeldTable{"held", Durability::kRebuilt};
inline std::string held() { return "yard:held"; }

// ---- jobs -------------------------------------------------------------------------------------
inline constexpr Table kJobTable{"jobs", Durability::kDurable};
inline std::string jobs() { return "yard:jobs"; }
inline std::string job_counter() { return "yard:counter:job"; }
inline std::string job(std::string_view id) { return "yard:job:" + std::string(id); }
// A job's log as the node running its program wrote it (a list of chunks, the newest kept) and
// what was given and dropped of it (hash: bytes, dropped), so that it outlives that node.
inline std::string job_log(std::string_view id) { return "yard:joblog:" + std::string(id); }
inline std::string job_log_meta(std::string_view id) { return "yard:joblog:" + std::string(id) + ":meta"; }
// The jobs in the queue (waiting, or admitted and not ended), and what each asked to run.
inline std::string job_queue() { return "yard:queue"; }
// Each team's decayed usage, which orders the queue's admissions (field per team; kUsageAt: when
// it was last brought up to date, unix seconds), so that a new head goes on with the same order.
inline std::string queue_usage() { return "yard:queue:usage"; }
inline constexpr const char* kUsageAt = "@at";
inline std::string job_submission(std::string_view id) { return "yard:job:" + std::string(id) + ":submission"; }
// The fields of a job's record that its allotment is read from (yard/allotment.h): the head's queue
// writes them, the job's own program reads them.
namespace job_field {
inline constexpr const char* kAdmittedAt = "admitted_at";  // unix seconds; 0 while queued
inline constexpr const char* kReplicaNodes = "replica_nodes";  // JSON list: the node of each replica given
inline constexpr const char* kReleasing = "releasing";      // JSON list: nodes of replicas asked to leave
inline constexpr const char* kStop = "stop";                // "", kStopRequeue or kStopEnd: asked to stop
inline constexpr const char* kStopRequeue = "requeue";      // preempted: queued again after it stops
inline constexpr const char* kStopEnd = "end";              // its time limit (or a cancel): it ends
inline constexpr const char* kStopBy = "stop_by";           // unix seconds: the stop's deadline
inline constexpr const char* kPreempted = "preempted";      // the latest preemption it gave way to, as text
}  // namespace job_field
// A job's timeline and training curves (shown by the dashboard; a lost one starts again).
inline constexpr Table kTimelineTable{"timelines", Durability::kRebuilt};
inline std::string timeline(std::string_view job_id) { return "yard:timeline:" + std::string(job_id); }
inline std::string curves(std::string_view job_id) { return "yard:curves:" + std::string(job_id); }

// ---- actors -----------------------------------------------------------------------------------
inline constexpr Table kActorTable{"actors", Durability::kDurable};
inline std::string actors() { return "yard:actors"; }
inline std::string actor_names() { return "yard:actor_names"; }
inline std::string actor(std::string_view id) { return "yard:actor:" + std::string(id); }
inline std::string actor_spec(std::string_view id) { return actor(id) + ":spec"; }

// ---- placement groups and their bundles --------------------------------------------------------
inline constexpr Table kGroupTable{"placement groups", Durability::kDurable};
inline std::string placement_group(std::string_view id) { return "yard:pg:" + std::string(id); }
inline std::string bundle(std::string_view group_id, int index) {
  return "yard:pgb:" + std::string(group_id) + ":" + std::to_string(index);
}

// ---- blobs: job binaries and working directories by SHA-256 digest, kept with the store -------
// (replicated with it) so that any head serves them; yard:blobs orders them by last use.
inline constexpr Table kBlobTable{"blobs", Durability::kDurable};
inline std::string blob(std::string_view digest) { return "yard:blob:" + std::string(digest); }
inline std::string blob_uses() { return "yard:blobs"; }

// ---- cluster events (a channel, and the log of the latest) --------------------------------------
inline constexpr Table kEventTable{"events", Durability::kRebuilt};
inline std::string events() { return "yard:events"; }
inline std::string event_log() { return "yard:events:log"; }

// ---- what a job's libraries keep (yard/job_store.h) ---------------------------------------------
// A job's rendezvous records, in spaces of their own ("collective"): a group that loses them
// meets again.
inline constexpr Table kRendezvousTable{"rendezvous", Durability::kRebuilt};
inline std::string rendezvous_prefix(std::string_view job_id, std::string_view space) {
  return "yard:rdv:" + std::string(job_id) + ":" + std::string(space) + ":";
}
// A job's checkpoint records: where each named checkpointer's latest checkpoint is.
inline constexpr Table kCheckpointTable{"checkpoints", Durability::kDurable};
inline std::string checkpoint(std::string_view job_id, std::string_view name) {
  return "yard:ckpt:" + std::string(job_id) + ":" + std::string(name);
}

// A prefix as a Redis glob that matches it literally (for SCAN MATCH prefix*): the glob's special
// characters escaped.
inline std::string glob_literal(std::string_view prefix) {
  std::string out;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace yard::keys
