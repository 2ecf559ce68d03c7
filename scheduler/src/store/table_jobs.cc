#include "store/tables.h"

#include "store/fields.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

using yard::sched::store::fields::num;
using yard::sched::store::fields::text;

namespace yard::sched::store {

std::string Jobs::new_id() { return "job-" + std::to_string(s_.cmd({"INCR", keys::job_counter()}).integer()); }

void Jobs::add(const std::string& id) { s_.cmd({"RPUSH", keys::jobs(), id}); }

std::vector<std::string> Jobs::ids() { return s_.cmd({"LRANGE", keys::jobs(), "0", "-1"}).strings(); }

void Jobs::save(const JobRecord& j) {
  s_.cmd({"HSET", keys::job(j.id), "entrypoint", j.entrypoint, "status", name(j.status), "exit_code",
          std::to_string(j.exit_code), "start", std::to_string(j.start), "end", std::to_string(j.end), "log",
          j.log_path, "driver_pid", std::to_string(j.driver_pid), "node", j.node, "submitted", j.submitted ? "1" : "0",
          "proc_pid", std::to_string(j.proc_pid), "binary", j.binary, "binary_digest", j.digest, "workdir_digest",
          j.workdir, "cwd", j.cwd});
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
  return j;
}

std::map<std::string, std::string> Jobs::fields(const std::string& id) { return s_.hgetall(keys::job(id)); }

}  // namespace yard::sched::store
