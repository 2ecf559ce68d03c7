// RunLog: what a training run writes next to its checkpoints, in --out: per optimizer step a
// line of steps.jsonl, per epoch a line of metrics.jsonl ({"event":"epoch",...}) and the curves
// (curves.svg), per recovery a line of metrics.jsonl ({"event":"recovery",...}) and a line of
// progress, per change of an elastic group's size a line ({"event":"resize",...}). A resumed run
// continues the same files: the epochs already reported are read back, and steps trained again
// replace the lines they had.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "job_types.h"
#include "recovery.h"
#include "yard/actors/elastic_group.h"
#include "yard/railway/plot.h"

namespace railway_train {

struct EpochRecord {
  uint64_t epoch = 0;
  int64_t steps = 0;
  double train_loss = 0;
  EvalStats val;
  double samples_per_s = 0;
  int workers = 0;
  int restarts = 0;
  double step_ms = 0;
  double checkpoint_stall_ms = 0;
};

class RunLog {
 public:
  // continuing: a resumed run (the files are kept and read back) rather than a new one.
  RunLog(std::string out, bool continuing);

  // One line of steps.jsonl.
  struct StepLine {
    int64_t step = 0;
    uint64_t epoch = 0;
    double loss = 0;
    int64_t samples = 0;
    // Parameter servers' staleness of the step (steps ahead of the slowest replica, updates
    // missed); -1 for the other strategies (not written).
    int64_t ahead = -1, stale = -1;
    double t = 0;  // when it ended (unix seconds); 0: not written
    // By rank, with more than one data-parallel rank: samples, seconds busy, seconds waiting for
    // the all-reduce (batch shares by speed show here).
    std::vector<int64_t> shares;
    std::vector<double> busy_s, wait_s;
  };
  void step(const StepLine& s);
  // Steps after `global_step` will be trained again: their lines go.
  void rewind(int64_t global_step);
  void epoch(const EpochRecord& e);
  void recovery(const Recovery& r);
  // An elastic group changed size: lr is the rate of the first step after it, pause the gap
  // between the last step before and the first after (seconds).
  void resize(const yard::actors::ElasticResize& r, double lr, double pause);
  // Epochs reported so far (by this run, or by the run it resumes).
  uint64_t epochs_reported() const { return reported_; }
  int recoveries() const { return recoveries_; }
  // The last step steps.jsonl held when the run was resumed (0: none).
  int64_t last_step() const { return last_step_; }
  // The last step steps.jsonl holds now.
  int64_t last_logged() const { return logged_; }
  void write_curves() const;
  // confusion.svg and precision_recall.svg of an evaluation, next to metrics.jsonl.
  void evaluation_images(const EvalStats& ev, uint64_t epoch) const;

 private:
  std::string out_;
  std::ofstream metrics_, steps_;
  uint64_t reported_ = 0;
  int recoveries_ = 0;
  int64_t last_step_ = 0;
  int64_t logged_ = 0;
};

// The chunk's steps (each rank's ChunkStats, by rank) as lines, per global step, over the ranks
// that report it (an elastic group's ranks may carry steps a lost peer cut short); the loss
// summed, not yet a mean. A step at or before `last_logged` goes with the first new one.
std::map<int64_t, RunLog::StepLine> steps_by_global(const std::vector<ChunkStats>& got, int64_t last_logged);

}  // namespace railway_train
