// The job queue on the command line (job_commands.cc): the shape options of `yard submit`
// (--team, --priority, --replicas, --replica, --fixed, --spread), `yard jobs` with the queue's
// columns (or --json), and `yard job cancel|hold|release|priority`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "blocking_client.h"

namespace yard::sched {

struct ShapeArgs {
  std::string team, credential, replicas, replica = "CPU=1", strategy = "SPREAD";
  int priority = 0;
  double time_limit = 0;
  std::vector<std::string> fixed;
  // Where the program runs (shape or none): a node that has these resources.
  std::string entrypoint_resources;
  double entrypoint_cpus = 0;
};
void add_shape_options(CLI::App* submit, ShapeArgs& s);
// Puts the shape in a SubmitJob (nothing without --replicas), and the entrypoint's resources.
// Throws yard::Error for a bad one, saying which option and why.
void set_shape(wire::SubmitJob::Builder sj, const ShapeArgs& s);

struct JobArgs {
  std::string action, job;
  int priority = 0;
};
CLI::App* define_job_command(CLI::App& app, JobArgs& a);
int job_command(BlockingClient& c, const JobArgs& a);

// `yard team-credential TEAM`: the team's credential, from the local head session's team key.
int print_team_credential(const std::string& team);

// `yard jobs`: a table, or every field as JSON.
int list_jobs(BlockingClient& c, bool as_json);
// Every job as `yard jobs --json` gives it (a queued job's rows with its team, priority, replicas
// and why it waits; the dashboard's queue view).
nlohmann::json job_list_json(BlockingClient& c);

}  // namespace yard::sched
