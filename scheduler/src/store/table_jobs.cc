#include "store/tables.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "store/fields.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

using yard::sched::store::fields::num;
using yard::sched::store::fields::text;

namespace yard::sched::store {

namespace {

using json = nlohmann::json;

json shape_json(const policy::JobShape& s) {
  return {{"fixed", s.fixed}, {"replica", s.replica}, {"min", s.min}, {"max", s.max}, {"strategy", policy::name(s.strategy)}};
}

// The shape a record holds; nullopt for one that cannot be read (the job then fails to be queued
// again, with the reason in the head's log).
std::optional<policy::JobShape> shape_of(const std::string& text) {
  try {
    auto j = json::parse(text);
    policy::JobShape s;
    s.fixed = j.at("fixed").get<std::vector<Res>>();
    s.replica = j.at("replica").get<Res>();
    s.min = j.at("min").get<int>();
    s.max = j.at("max").get<int>();
    s.strategy = policy::parse_bundle_strategy(j.at("strategy").get<std::string>()).value_or(policy::BundleStrategy::kSpread);
    return s;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

const char* stop_name(QueueEntry::Stop s) {
  switch (s) {
    case QueueEntry::Stop::kRequeue: return keys::job_field::kStopRequeue;
    case QueueEntry::Stop::kEnd: return keys::job_field::kStopEnd;
    case QueueEntry::Stop::kNo: break;
  }
  return "";
}

QueueEntry::Stop parse_stop(const std::string& s) {
  if (s == keys::job_field::kStopRequeue) return QueueEntry::Stop::kRequeue;
  if (s == keys::job_field::kStopEnd) return QueueEntry::Stop::kEnd;
  return QueueEntry::Stop::kNo;
}

// The queue's fields of a record (the head's queue owns them; the job's runner, the rest).
void add_queue_fields(std::vector<std::string>& c, const QueueEntry& q) {
  namespace f = keys::job_field;
  std::vector<std::string> more{"team", q.team, "priority", std::to_string(q.priority), "shape", shape_json(q.shape).dump(),
                                "queued_at", std::to_string(q.queued_at), f::kAdmittedAt, std::to_string(q.admitted_at),
                                "held", q.held ? "1" : "0", "fixed_nodes", json(q.fixed_nodes).dump(), f::kReplicaNodes,
                                json(q.replica_nodes).dump(), f::kReleasing, json(q.releasing).dump(), f::kPreempted, q.preempted,
                                f::kStop, stop_name(q.stop), f::kStopBy, std::to_string(q.stop_by), "requeues",
                                std::to_string(q.requeues), "time_limit", std::to_string(q.time_limit)};
  c.insert(c.end(), more.begin(), more.end());
}

std::vector<std::string> job_hset(const JobRecord& j) {
  std::vector<std::string> c{"HSET", keys::job(j.id), "entrypoint", j.entrypoint, "status", name(j.status), "exit_code",
          std::to_string(j.exit_code), "start", std::to_string(j.start), "end", std::to_string(j.end), "log",
          j.log_path, "driver_pid", std::to_string(j.driver_pid), "node", j.node, "submitted", j.submitted ? "1" : "0",
          "proc_pid", std::to_string(j.proc_pid), "binary", j.binary, "binary_digest", j.digest, "workdir_digest",
          j.workdir, "cwd", j.cwd};
  // Its driver's registration sets it; a writer that never read it (a node running the job's
  // program) leaves it as it is.
  if (!j.ns.empty()) c.insert(c.end(), {"namespace", j.ns});
  if (j.detached_actors) c.insert(c.end(), {"detached_actors", "1"});
  if (j.queue) add_queue_fields(c, *j.queue);
  return c;
}

std::vector<std::string> nodes_of(const std::string& text) {
  try {
    return json::parse(text).get<std::vector<std::string>>();
  } catch (const json::exception&) {
    return {};
  }
}

std::optional<QueueEntry> queue_entry(const std::map<std::string, std::string>& f) {
  auto shape = shape_of(text(f, "shape"));
  if (!shape) return std::nullopt;
  QueueEntry q;
  q.team = text(f, "team");
  q.priority = static_cast<int>(num(f, "priority"));
  q.shape = std::move(*shape);
  q.queued_at = num(f, "queued_at");
  q.admitted_at = num(f, keys::job_field::kAdmittedAt);
  q.held = text(f, "held") == "1";
  q.fixed_nodes = nodes_of(text(f, "fixed_nodes"));
  q.replica_nodes = nodes_of(text(f, keys::job_field::kReplicaNodes));
  q.releasing = nodes_of(text(f, keys::job_field::kReleasing));
  q.preempted = text(f, keys::job_field::kPreempted);
  q.stop = parse_stop(text(f, keys::job_field::kStop));
  q.stop_by = num(f, keys::job_field::kStopBy);
  q.requeues = static_cast<int>(num(f, "requeues"));
  q.time_limit = num(f, "time_limit");
  return q;
}

}  // namespace

std::string Jobs::new_id() { return "job-" + std::to_string(s_.cmd({"INCR", keys::job_counter()}).integer()); }

void Jobs::add(const std::string& id) { s_.cmd({"RPUSH", keys::jobs(), id}); }

std::vector<std::string> Jobs::ids() { return s_.cmd({"LRANGE", keys::jobs(), "0", "-1"}).strings(); }

void Jobs::save(const JobRecord& j) { s_.write({job_hset(j)}); }

void Jobs::save_queue(const std::string& id, const QueueEntry& q) {
  std::vector<std::string> c{"HSET", keys::job(id)};
  add_queue_fields(c, q);
  s_.write({c});
}

void Jobs::enqueue(const JobRecord& j, const std::string& submission) {
  s_.write({{"RPUSH", keys::jobs(), j.id}, job_hset(j), {"SET", keys::job_submission(j.id), submission},
            {"SADD", keys::job_queue(), j.id}});
}

std::vector<std::string> Jobs::queued() { return s_.cmd({"SMEMBERS", keys::job_queue()}).strings(); }

void Jobs::set_submission(const std::string& id, const std::string& submission) {
  s_.write({{"SET", keys::job_submission(id), submission}});
}

std::optional<std::string> Jobs::submission(const std::string& id) {
  auto r = s_.cmd({"GET", keys::job_submission(id)});
  if (r.is_nil()) return std::nullopt;
  return r.str();
}

void Jobs::leave_queue(const std::string& id) { s_.write({{"SREM", keys::job_queue(), id}}); }

void Jobs::save_usage(const Usage& u) {
  std::vector<std::string> c{"HSET", keys::queue_usage(), keys::kUsageAt, fmt::format("{:.3f}", u.at)};
  for (auto& [team, v] : u.teams) c.push_back(team), c.push_back(fmt::format("{:.6g}", v));
  s_.write({c});
}

Jobs::Usage Jobs::usage() {
  Usage u;
  for (auto& [k, v] : s_.hgetall(keys::queue_usage())) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end || !std::isfinite(x) || x < 0) {
      spdlog::warn("the queue's usage record has '{}' for {}: not a count; that team starts again from 0", v, k);
      continue;
    }
    if (k == keys::kUsageAt) u.at = x;
    else u.teams[k] = x;
  }
  return u;
}

std::optional<JobRecord> Jobs::get(const std::string& id) {
  auto f = s_.hgetall(keys::job(id));
  if (f.empty()) return std::nullopt;
  JobRecord j;
  j.id = id;
  j.entrypoint = text(f, "entrypoint");
  j.status = parse_job_status(text(f, "status")).value_or(JobStatus::kFailed);
  j.exit_code = static_cast<int>(num(f, "exit_code"));
  j.start = num(f, "start");
  j.end = num(f, "end");
  j.log_path = text(f, "log");
  j.driver_pid = static_cast<long>(num(f, "driver_pid"));
  j.node = text(f, "node");
  j.submitted = text(f, "submitted") == "1";
  j.proc_pid = static_cast<long>(num(f, "proc_pid"));
  j.binary = text(f, "binary");
  j.digest = text(f, "binary_digest");
  j.workdir = text(f, "workdir_digest");
  j.cwd = text(f, "cwd");
  j.ns = text(f, "namespace");
  j.detached_actors = text(f, "detached_actors") == "1";
  if (f.count("shape")) j.queue = queue_entry(f);
  return j;
}

std::map<std::string, std::string> Jobs::fields(const std::string& id) { return s_.hgetall(keys::job(id)); }

}  // namespace yard::sched::store

namespace yard::sched::store {

namespace {

// KEYS: the log, its meta hash; ARGV: the chunk, the bytes to keep, the TTL in seconds. The
// oldest chunks go while more than the bytes to keep are held (the newest always stays).
constexpr const char* kAppendLog = R"lua(
redis.call('RPUSH', KEYS[1], ARGV[1])
local held = redis.call('HINCRBY', KEYS[2], 'held', #ARGV[1])
redis.call('HINCRBY', KEYS[2], 'size', #ARGV[1])
while held > tonumber(ARGV[2]) and redis.call('LLEN', KEYS[1]) > 1 do
  local old = redis.call('LPOP', KEYS[1])
  held = redis.call('HINCRBY', KEYS[2], 'held', -#old)
  redis.call('HINCRBY', KEYS[2], 'dropped', #old)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return held
)lua";

constexpr long kLogTtlS = 7 * 24 * 3600;

}  // namespace

void Jobs::append_log(const std::string& id, const std::string& chunk) {
  if (chunk.empty()) return;
  s_.cmd({"EVAL", kAppendLog, "2", keys::job_log(id), keys::job_log_meta(id), chunk, std::to_string(kLogKeep),
          std::to_string(kLogTtlS)});
}

Jobs::Log Jobs::log(const std::string& id, uint64_t offset, size_t max) {
  auto reps = s_.pipeline({{"HMGET", keys::job_log_meta(id), "size", "dropped"}, {"LRANGE", keys::job_log(id), "0", "-1"}});
  Log out;
  if (reps[0].at(0).empty()) return out;
  out.kept = true;
  out.size = std::strtoull(reps[0].at(0).c_str(), nullptr, 10);
  uint64_t at = std::strtoull(reps[0].at(1).c_str(), nullptr, 10);  // the first kept byte's offset
  out.from = std::max(offset, at);
  for (auto& chunk : reps[1].strings()) {
    uint64_t end = at + chunk.size();
    if (end > out.from && out.data.size() < max) {
      size_t skip = static_cast<size_t>(out.from + out.data.size() - at);
      out.data.append(chunk, skip, max - out.data.size());
    }
    at = end;
  }
  return out;
}

}  // namespace yard::sched::store
