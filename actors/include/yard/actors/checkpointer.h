// Checkpointer: an actor that keeps a training job's checkpoints.
//
// Trainers hand it a snapshot (model, optimizer, schedule, data-loader position, step: named
// blobs) with save() and go on training; the actor writes it atomically with a CheckpointStore
// (temporary file, fsync, rename, fsync of the directory), moves the "latest" pointer — the file
// LATEST and, in a cluster, the job's checkpoint record of <name> (yard::latest_checkpoint) — and
// keeps the newest `keep`. restore() gives the newest checkpoint that verifies, passing over
// corrupt or partial files (each named, with the reason, by skipped()). Because it is its own
// process, a write handed over completes even when the trainer that sent it dies next.
//
// Place it where the checkpoint directory is (the driver's node, or one with the shared disk).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "yard/actors/checkpoint.h"
#include "yard/yard.h"

namespace yard::actors {

// A checkpoint on the wire.
struct CheckpointData {
  uint64_t step = 0;
  std::map<std::string, std::string> blobs;
  YARD_FIELDS(step, blobs);
};

class Checkpointer {
 public:
  Checkpointer(std::string dir, int64_t keep, std::string name);
  ~Checkpointer();

  // Writes the checkpoint; returns its path. Throws (the caller's get() sees it) with the path and
  // the reason when it cannot be written; earlier checkpoints stay.
  std::string save(CheckpointData c);
  // The newest complete checkpoint; nullopt when there is none.
  std::optional<CheckpointData> restore();
  // The part `blob` of the newest complete checkpoint that has it, alone (a helper that restarts,
  // such as a parameter server, takes back its own part); nullopt when none has it.
  std::optional<CheckpointData> part(std::string blob);
  // What restore() passed over and why.
  std::vector<std::string> skipped();
  // The newest checkpoint's step as the control store has it (-1: none yet).
  int64_t latest_step();
  // The process and node the checkpointer runs in (for the job's progress report).
  int pid();
  std::string node();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yard::actors
