// The format the control store's records are written in. A head stamps a new store with its
// format, goes on with a store of its own format, migrates an older one step by step (each step a
// function of the store, run once, in order), and refuses one written by a newer Switchyard with a
// message that says what to do, before it reads or writes any record.
#pragma once

#include <string>

#include "store/tables.h"

namespace yard::sched::store {

// The format this build writes. 1: the records before the store kept a format number (the
// rendezvous of every job's groups shared `yard:coll:<group>:`); 2: rendezvous keys per job, and
// the format number in `yard:cluster`.
inline constexpr int kStoreFormat = 2;

struct FormatCheck {
  enum class Action {
    kFresh,    // an empty store: stamp it
    kCurrent,  // written in this format
    kMigrate,  // an older format (or none: format 1): migrate from `from`, then stamp
    kRefuse,   // a newer or unreadable format: `message` says what and what to do
  };
  Action action = Action::kFresh;
  int from = 0;
  std::string message;
};

// What a head does with a store whose format field is `found` ("" when absent), holding cluster
// records or not (pure).
FormatCheck check_format(const std::string& found, bool has_records, int current = kStoreFormat);

// Checks the store at `where` (its address, for the message) and migrates or stamps it. Returns
// what was done ("" when nothing needed doing), or throws yard::Error with the refusal.
std::string settle_format(StoreLink& s, const std::string& where);

}  // namespace yard::sched::store
