// The training job's data: simulated logs, recorded by Aligner actors spread over the nodes, then
// turned into shards by Aligner actors on the nodes that hold the logs. A log and its shards are
// written under a temporary name and renamed when complete, so a process lost half-way leaves
// nothing that looks finished; a lost aligner's work is done again (its actor restarts).
#pragma once

#include <string>
#include <vector>

#include "recovery.h"

namespace railway_train {

struct DataSpec {
  std::string dir;     // logs and shards
  int logs = 2;        // logs to train on (log-0 .. log-N-1)
  double length_km = 25;
  bool unaligned = false;
};

// Makes what is missing; returns the shard directories to train on. Throws, saying which and
// why, when the directory holds logs made with other settings.
std::vector<std::string> make_shards(const DataSpec& spec, const RecoveryReport& report);

}  // namespace railway_train
