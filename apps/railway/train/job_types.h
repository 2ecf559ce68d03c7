// What the railway training job's driver and its trainer actors exchange (no LibTorch here: the
// driver's files compile without it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "yard/yard.h"

namespace railway_train {

// What every trainer is set up with.
struct TrainConfig {
  std::vector<std::string> shards;  // shard directories (each with its manifest.json)
  int64_t d_model = 64, layers = 2, heads = 4;
  int64_t batch = 32;          // per worker
  double base_lr = 1e-3;       // for base_batch
  int64_t base_batch = 32;
  int64_t warmup_steps = 20;
  std::string decay = "cosine";  // after warm-up: cosine (to min_lr_fraction at the last step) or constant
  double min_lr_fraction = 0.0;
  int64_t epochs = 6;          // the schedule's length
  std::string optimizer = "adamw";  // or sgd (momentum 0.9)
  double weight_decay = 1e-4;
  double holdout = 0.2;        // the last fraction of every line's chainage is the validation track
  uint64_t seed = 17;
  double clip = 1.0;
  double balance = 0.5;       // class-balanced epochs (defect windows are rare): a class's share grows
                               // as its size^(1 - balance); 0: plain epochs
  bool resume = false;         // start from the newest complete checkpoint, if any
  bool aligned = true;         // the shards were made with alignment (recorded in the model's spec)
  int64_t prefetch = 2;        // batches the data loader makes ahead
  int64_t accumulate = 1;      // micro-batches per optimizer step (gradients accumulated locally, no_sync)
  std::string strategy = "ddp";  // or local-sgd (replicas step alone, averaged every sync_every steps),
                                 // ps (parameter servers hold the weights and the optimizer), or pipeline
                                 // (the encoder's layers split over pp stages, replicas of pp trainers each)
  int64_t sync_every = 4;
  int64_t ps_servers = 2;        // ps: server actors, each with a shard of the parameters
  std::string ps_mode = "sync";  // ps: sync, async or ssp:K
  int64_t ps_restarts = 3;       // ps: restarts in place of a lost server (from its shard's newest checkpoint)
  std::string batch_queue;       // ps async: the BatchQueue actor the trainers claim batches from (set by the driver)
  bool join = false;             // ps: a replacement joining a running group (takes the weights from the servers)
  int64_t join_step = 0;         // ps sync/ssp: the global step the group's chunk began at (set by the driver)
  int64_t pp = 1;                // pipeline: stages per replica (the trainers are replicas x pp)
  int64_t micro_batches = 8;     // pipeline: micro-batches each batch is split into (1F1B)
  std::vector<int> stage_split;  // pipeline: encoder layers per stage from the checkpoint resumed (empty: planned)
  std::vector<std::string> retired_generations;  // earlier group generations of this run (set by the driver)
  int64_t min_workers = 0;     // > 0: an elastic group (--workers MIN:MAX) that starts with this many
  int64_t resize_warmup = 10;  // elastic: steps over which the rate moves to a new global batch's
  std::string batch_shares = "speed";  // elastic ddp: each rank's part of a step by its measured speed, or "equal"
  YARD_FIELDS(shards, d_model, layers, heads, batch, base_lr, base_batch, warmup_steps, decay, min_lr_fraction, epochs,
              optimizer, weight_decay, holdout, seed, clip, balance, resume, aligned, prefetch, accumulate,
              strategy, sync_every, ps_servers, ps_mode, ps_restarts, batch_queue, join, join_step, pp, micro_batches, stage_split, retired_generations,
              min_workers, resize_warmup, batch_shares);
};

// Where a trainer stands among the job's: its data-parallel replica and, with the pipeline
// strategy, its stage in that replica's pipeline (rank = replica x stages + stage).
struct Layout {
  int replicas = 1, replica = 0, stages = 1, stage = 0;
};
inline Layout layout_of(const TrainConfig& cfg, int rank, int world) {
  int stages = cfg.strategy == "pipeline" ? static_cast<int>(cfg.pp) : 1;
  return {world / stages, rank / stages, stages, rank % stages};
}

// Where a group stands after set-up: the data, the schedule, the data loader's position.
struct SetupInfo {
  int64_t windows = 0;          // training windows
  int64_t steps_per_epoch = 0;  // optimizer steps
  uint64_t epoch = 0, step = 0;  // where the next chunk starts
  int64_t global_step = 0;       // 0, or the checkpoint's step it resumed from
  int pid = 0;
  std::string node;
  int restored_from = -1;  // the checkpointer replica whose checkpoint it resumed from (-1: none)
  std::vector<int> ps_pids;  // rank 0 with parameter servers: the servers' processes
  std::vector<int> stage_layers;  // pipeline: the encoder layers of each stage
  int64_t steps_left = 0;         // steps left in the epoch at the group's size now
  int64_t parameters = 0;         // model parameters the trainer holds (a pipeline stage: its part's)
  YARD_FIELDS(windows, steps_per_epoch, epoch, step, global_step, pid, node, restored_from, ps_pids, stage_layers,
              steps_left, parameters);
};

// What a chunk of steps did on one rank: per step, the loss summed over its samples and the count.
// A process the strategy runs beside the trainers (a parameter server) that was lost and restarted
// in place, as rank 0 saw it.
struct HelperRestart {
  std::string what;      // "parameter server 1"
  int pid = 0;           // its process now
  int restarts = 0;      // its restarts so far
  std::string restored;  // what it restored and how the job went on
  double seconds = 0;    // restoring took
  YARD_FIELDS(what, pid, restarts, restored, seconds);
};

struct ChunkStats {
  std::vector<double> loss_sum;
  std::vector<int64_t> samples;
  uint64_t epoch = 0, step = 0;  // the data loader's position after the chunk
  int64_t global_step = 0;
  double lr = 0;
  double seconds = 0;
  double checkpoint_ms = 0;  // training time the checkpoint hand-over took (rank 0, when it saved)
  // Recoveries the rank made on its own (a checkpoint handed again to a restarted Checkpointer).
  std::vector<std::string> notes;
  // ps, per step: steps ahead of the slowest replica, and updates missed between pull and push.
  std::vector<int64_t> ahead, stale_updates;
  std::vector<double> step_end;   // per step: when it ended (unix seconds)
  std::vector<int64_t> steps;     // per step: its global step (1-based: the count after it)
  std::vector<double> lrs;        // per step: its learning rate
  int64_t steps_left = 0;         // steps left in the epoch at the group's size now
  std::vector<HelperRestart> helper_restarts;  // rank 0: helpers restarted in place during the chunk
  // Data parallel, per step: this rank's seconds busy and waiting for the all-reduce.
  std::vector<double> busy_s, wait_s;
  YARD_FIELDS(loss_sum, samples, epoch, step, global_step, lr, seconds, checkpoint_ms, notes, ahead, stale_updates,
              step_end, steps, lrs, steps_left, helper_restarts, busy_s, wait_s);
};

// The model on the held-out track: windows' classes (macro-F1 over the classes present there).
struct EvalStats {
  double loss = 0, accuracy = 0, macro_f1 = 0, amplitude_rmse = 0;
  int64_t samples = 0;
  std::vector<int64_t> confusion;         // 5 x 5, row: true class, column: predicted
  std::vector<double> precision, recall;  // per class (NaN: no window predicted / present)
  // Per defect class 1..4: (recall, precision) pairs as the score threshold falls, flattened.
  std::vector<std::vector<double>> pr_curve;
  YARD_FIELDS(loss, accuracy, macro_f1, amplitude_rmse, samples, confusion, precision, recall, pr_curve);
};

}  // namespace railway_train
