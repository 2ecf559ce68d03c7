// A replicated control store as it is now, for `yard status` and the dashboard: the primary, each
// replica with its state and how far it is behind, and whether the Sentinels can fail the primary
// over.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "yard/internal/redis.h"

namespace yard::sched::store {

// {"primary", "replicas": [{"address", "state", "lag_s", "bytes_behind"}], "sentinels":
// [{"address", "ok", "says"}], "quorum": bool (a Sentinel says a failover can be authorised)}. `primary` is the connection to the primary (one
// that follows Sentinels); each Sentinel is asked on a connection of its own, briefly.
nlohmann::json replication_status(sys::Redis& primary, const std::string& password);

// The replica lines of INFO replication ("slaveN:ip=...,port=...,state=...,offset=...,lag=...")
// with the primary's offset: the "replicas" array above. Pure, for tests.
nlohmann::json parse_replicas(const std::string& info);

}  // namespace yard::sched::store
