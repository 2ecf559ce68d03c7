#include "job_commands.h"

#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "common/credentials.h"
#include "yard/internal/session.h"
#include "yard/internal/messaging.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::sched {

namespace {

// "CPU=1,memory=2e9" as resources; throws naming the option.
std::map<std::string, double> parse_res(const std::string& text, const std::string& option) {
  std::map<std::string, double> r;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    auto eq = item.find('=');
    double v = 0;
    try {
      size_t used = 0;
      if (eq == std::string::npos || eq == 0) throw std::invalid_argument("no NAME=AMOUNT");
      v = std::stod(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || !std::isfinite(v) || v < 0) throw std::invalid_argument("bad amount");
    } catch (const std::exception&) {
      throw Error(option + " '" + text + "': expected NAME=AMOUNT[,NAME=AMOUNT...] with amounts of at least 0, e.g. CPU=1,memory=2e9");
    }
    r[item.substr(0, eq)] += v;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return r;
}

wire::PlacementStrategy strategy_of(const std::string& s) {
  if (s == "PACK") return wire::PlacementStrategy::PACK;
  if (s == "SPREAD") return wire::PlacementStrategy::SPREAD;
  if (s == "STRICT_PACK") return wire::PlacementStrategy::STRICT_PACK;
  if (s == "STRICT_SPREAD") return wire::PlacementStrategy::STRICT_SPREAD;
  throw Error("--placement '" + s + "': one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD");
}

std::string wait_text(const std::string& reason, const std::string& detail) {
  std::string r = reason;
  for (auto& ch : r) ch = ch == '_' ? ' ' : ch;
  return detail.empty() ? r : r + ": " + detail;
}

}  // namespace

void add_shape_options(CLI::App* submit, ShapeArgs& s) {
  submit->add_option("--entrypoint-resources", s.entrypoint_resources,
                     "run the program on a node that has these resources, NAME=AMOUNT[,...] (the head's node when "
                     "it has them); they are not held while it runs");
  submit->add_option("--entrypoint-num-cpus", s.entrypoint_cpus, "as --entrypoint-resources CPU=N")
      ->check(CLI::NonNegativeNumber);
  const char* g = "The job queue";
  submit->add_option("--replicas", s.replicas,
                     "the job's elastic replicas, MIN:MAX (or N): it waits in the queue until its fixed parts and MIN "
                     "replicas fit, and starts at once without this option")
      ->group(g);
  submit->add_option("--replica", s.replica, "what one replica holds, NAME=AMOUNT[,...]")->default_val("CPU=1")->group(g);
  submit->add_option("--fixed", s.fixed, "one fixed part (the driver, an aligner, a checkpointer): NAME=AMOUNT[,...]; repeat it")
      ->allow_extra_args(false)
      ->group(g);
  submit->add_option("--placement", s.strategy, "how the replicas spread over nodes: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD")
      ->default_val("SPREAD")->group(g);
  submit->add_option("--team", s.team, "the team the job counts against")->group(g);
  submit->add_option("--team-credential", s.credential, "the team's credential, when the cluster has teams")
      ->envname("YARD_TEAM_CREDENTIAL")->group(g);
  submit->add_option("--priority", s.priority, "higher goes first and may preempt lower")->default_val(0)->group(g);
  submit->add_option("--time-limit", s.time_limit,
                     "seconds the job may run once admitted; then it is asked to checkpoint and stop (the queue's "
                     "stop_grace_s later its program is stopped)")
      ->check(CLI::PositiveNumber)
      ->group(g);
}

void set_shape(wire::SubmitJob::Builder sj, const ShapeArgs& s) {
  std::map<std::string, double> entry = s.entrypoint_resources.empty() ? std::map<std::string, double>{} : parse_res(s.entrypoint_resources, "--entrypoint-resources");
  if (s.entrypoint_cpus > 0) entry["CPU"] = s.entrypoint_cpus;
  detail::set_resources(sj.initEntrypointResources(static_cast<unsigned>(entry.size())), entry);
  if (s.replicas.empty()) {
    if (!s.team.empty() || s.priority != 0 || !s.fixed.empty() || s.time_limit > 0)
      throw Error("--team, --priority, --fixed and --time-limit need --replicas MIN:MAX (the job's shape, which the "
                  "queue admits)");
    return;
  }
  int min = 0, max = 0;
  auto colon = s.replicas.find(':');
  try {
    size_t used = 0;
    std::string a = s.replicas.substr(0, colon), b = colon == std::string::npos ? a : s.replicas.substr(colon + 1);
    min = std::stoi(a, &used);
    if (used != a.size()) throw std::invalid_argument("MIN");
    max = std::stoi(b, &used);
    if (used != b.size()) throw std::invalid_argument("MAX");
  } catch (const std::exception&) {
    throw Error("--replicas '" + s.replicas + "': expected MIN:MAX or N, e.g. 1:4");
  }
  if (min < 0 || max < 1 || min > max) throw Error("--replicas '" + s.replicas + "': needs 0 <= MIN <= MAX and MAX >= 1");
  sj.setTeam(s.team);
  sj.setTeamCredential(s.credential);
  sj.setPriority(s.priority);
  sj.setTimeLimit(s.time_limit);
  auto sh = sj.initShape();
  sh.setMinReplicas(min);
  sh.setMaxReplicas(max);
  sh.setStrategy(strategy_of(s.strategy));
  auto rep = parse_res(s.replica, "--replica");
  detail::set_resources(sh.initReplica(static_cast<unsigned>(rep.size())), rep);
  auto fixed = sh.initFixed(static_cast<unsigned>(s.fixed.size()));
  for (unsigned i = 0; i < s.fixed.size(); ++i) {
    auto f = parse_res(s.fixed[i], "--fixed");
    detail::set_resources(fixed[i].initResources(static_cast<unsigned>(f.size())), f);
  }
}

CLI::App* define_job_command(CLI::App& app, JobArgs& a) {
  auto* job = app.add_subcommand("job", "change a job in the queue: cancel, hold, release, or set its priority");
  job->add_option("action", a.action, "cancel | hold | release | priority")
      ->required()
      ->check(CLI::IsMember({"cancel", "hold", "release", "priority"}));
  job->add_option("job", a.job, "job id")->required();
  job->add_option("priority", a.priority, "the new priority (with `priority`)");
  return job;
}

int job_command(BlockingClient& c, const JobArgs& a) {
  wire::JobAction action = a.action == "cancel"    ? wire::JobAction::CANCEL
                           : a.action == "hold"    ? wire::JobAction::HOLD
                           : a.action == "release" ? wire::JobAction::RELEASE
                                                   : wire::JobAction::SET_PRIORITY;
  c.call([&](wire::Envelope::Builder env) {
    auto jc = env.getBody().initJobControl();
    jc.setJobId(a.job);
    jc.setAction(action);
    jc.setPriority(a.priority);
  });
  std::string done = a.action == "cancel" ? "cancelled" : a.action == "hold" ? "held" : a.action == "release" ? "released"
                                                                                                   : "priority " + std::to_string(a.priority);
  std::cout << a.job << ": " << done << "\n";
  return 0;
}

int print_team_credential(const std::string& team) {
  auto rec = detail::latest_record();
  if (!rec) throw Error("no head runs on this machine under YARD_HOME: run `yard team-credential` where the head runs");
  std::string key_file = team_key_file(rec->session_dir);
  if (!std::filesystem::exists(key_file)) throw Error(key_file + " is missing: the head has not made its team key");
  std::cout << team_credential(detail::read_token(key_file), team) << "\n";
  return 0;
}

nlohmann::json job_list_json(BlockingClient& c) {
  auto r = c.call([](wire::Envelope::Builder env) { env.getBody().setListJobs(); });
  double now = sys::unix_time();
  auto out = nlohmann::json::array();
  for (auto j : r->env().getBody().getJobList()) {
    nlohmann::json row{{"job_id", j.getJobId().cStr()}, {"status", j.getStatus().cStr()}, {"exit_code", j.getExitCode()},
                       {"entrypoint", j.getEntrypoint().cStr()}, {"start_time", j.getStartTime()}, {"end_time", j.getEndTime()},
                       {"node", j.getNodeId().cStr()}};
    if (j.getShaped()) {
      row.update({{"team", j.getTeam().cStr()}, {"priority", j.getPriority()}, {"replicas", j.getReplicas()},
                  {"min_replicas", j.getMinReplicas()}, {"max_replicas", j.getMaxReplicas()}, {"queued_at", j.getQueuedAt()}});
      if (j.getPreempted().size()) row["preempted"] = j.getPreempted().cStr();
      if (j.getWaitReason().size())
        row["waiting"] = {{"reason", j.getWaitReason().cStr()},
                          {"detail", j.getWaitDetail().cStr()},
                          {"for_s", now - j.getQueuedAt()},
                          {"text", wait_text(j.getWaitReason().cStr(), j.getWaitDetail().cStr())}};
    }
    out.push_back(std::move(row));
  }
  return out;
}

int list_jobs(BlockingClient& c, bool as_json) {
  if (as_json) {
    std::cout << job_list_json(c).dump(2) << "\n";
    return 0;
  }
  auto r = c.call([](wire::Envelope::Builder env) { env.getBody().setListJobs(); });
  double now = sys::unix_time();
  std::cout << fmt::format("{:<10} {:<10} {:>5}  {:<8} {:>4}  {:<9}  {}\n", "JOB", "STATUS", "EXIT", "TEAM", "PRIO", "REPLICAS", "ENTRYPOINT");
  for (auto j : r->env().getBody().getJobList()) {
    std::string status = j.getStatus().cStr();
    bool ended = status != "RUNNING" && status != "QUEUED";
    std::string team = j.getShaped() ? (j.getTeam().size() ? j.getTeam().cStr() : "-") : "";
    std::string prio = j.getShaped() ? std::to_string(j.getPriority()) : "";
    std::string reps = j.getShaped() ? fmt::format("{}/{}:{}", j.getReplicas(), j.getMinReplicas(), j.getMaxReplicas()) : "";
    std::cout << fmt::format("{:<10} {:<10} {:>5}  {:<8} {:>4}  {:<9}  {}\n", j.getJobId().cStr(), status,
                             ended ? std::to_string(j.getExitCode()) : std::string("-"), team, prio, reps, j.getEntrypoint().cStr());
    if (status == "QUEUED" && j.getWaitReason().size())
      std::cout << fmt::format("{:<10} waiting {:.0f} s: {}\n", "", now - j.getQueuedAt(),
                               wait_text(j.getWaitReason().cStr(), j.getWaitDetail().cStr()));
    if (status == "RUNNING" && j.getPreempted().size()) std::cout << fmt::format("{:<10} preempted: {}\n", "", j.getPreempted().cStr());
  }
  return 0;
}

}  // namespace yard::sched
