// The training data of railway-train: simulated train logs recorded and aligned into shards by
// Aligner actors, on the nodes that hold the logs.
#pragma once

#include <string>

// Makes the shards under `data` that are missing: logs that do not exist yet are recorded first,
// spread over the nodes; every log is then aligned (or, `unaligned`, cut without alignment, the
// baseline) by an Aligner on the node it is on (soft: elsewhere when that node is gone), up to
// two per node at a time.
void make_shards(const std::string& data, int logs, double length_km, bool unaligned);
