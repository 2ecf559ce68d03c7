// The railway training job's driver: data, the checkpointer, the trainers' placement group and
// group, then epochs in chunks of steps, each epoch evaluated on held-out track, and the end.
//
// Any one process of the job may be lost at any moment and the job still completes, at the same
// result: a lost aligner's log or shards are made again; a lost trainer (in set-up, a step,
// evaluation or the final save) restarts the group from the newest complete checkpoint, which
// holds the model, optimizer, schedule and data-loader position, so the same steps follow; a
// checkpointer lost while it writes is restarted and handed the checkpoint again. Each recovery is
// reported. When more restarts than --max-restarts are needed the job stops and says how to
// resume; `--resume RUN_DIR` continues a run whose driver was lost, from its newest checkpoint.
#pragma once

#include <map>
#include <string>

#include "job_types.h"
#include "make_shards.h"

namespace railway_train {

struct JobSpec {
  DataSpec data;
  std::string out = "railway-out";
  int workers = 2;      // the trainers (an elastic group's most)
  int min_workers = 0;  // > 0: an elastic group of min_workers..workers trainers
  std::map<std::string, double> trainer_resources{{"CPU", 1}};  // what each trainer asks of a node
  int epochs = 6;
  std::string placement = "PACK";
  int64_t checkpoint_every = 100;
  int64_t keep = 3;
  int checkpoint_replicas = 2;  // Checkpointer actors, each keeping every checkpoint
  int max_restarts = 3;
  TrainConfig train;  // its shards, epochs and resume are the job's to fill in
};

// The exit status of a job that the job queue asked to stop (yard/allotment.h) and that stopped
// with its progress in a checkpoint (EX_TEMPFAIL): a preempted job is queued again and, run with the
// next YARD_JOB_ATTEMPT, continues the run.
inline constexpr int kExitStopped = 75;

// Runs the job; returns the process's exit status (errors are printed).
int run_job(const JobSpec& spec);
// Continues the run in run_dir (out/checkpoints/run-...) with the settings it was started with.
int resume_job(const std::string& run_dir);
// The newest run under out/checkpoints that has not finished ("" when none): what a job run again
// after its driver died (`yard submit --max-retries`) or after the job queue preempted it
// (YARD_JOB_ATTEMPT > 1) continues.
std::string unfinished_run(const std::string& out);

}  // namespace railway_train
