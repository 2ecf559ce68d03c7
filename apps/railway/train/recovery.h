// How the railway job reports what it survived: the phase a process was lost in, which one, the
// error the driver saw, what was done again and what it cost. The driver prints each one and
// keeps it in metrics.jsonl ({"event":"recovery",...}).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "yard/yard.h"

namespace railway_train {

enum class Phase { kRecording, kAligning, kSetup, kTraining, kCheckpoint, kEvaluation, kFinish };

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kRecording: return "recording";
    case Phase::kAligning: return "aligning";
    case Phase::kSetup: return "group setup";
    case Phase::kTraining: return "training";
    case Phase::kCheckpoint: return "a checkpoint write";
    case Phase::kEvaluation: return "evaluation";
    case Phase::kFinish: return "the final save";
  }
  return "?";
}

struct Recovery {
  Phase phase = Phase::kTraining;
  std::string lost;     // "trainer rank 1 (pid 123)", "aligner (pid 77)", "the checkpointer"
  std::string error;    // what the driver saw
  std::string redone;   // "log-0 recorded again", "resumed from step 40: 8 steps trained again"
  double seconds = 0;   // from noticing the loss to the work going on again
  int64_t steps_redone = 0;
  bool asked = false;   // not a loss: the job was asked to stop (the job queue) and resumed
};

using RecoveryReport = std::function<void(const Recovery&)>;

// Whether an error means a process of the job was lost (the work can be done again), rather than
// a fault of the work itself (which would fail again the same way).
inline bool is_process_loss(const std::exception& e) {
  if (dynamic_cast<const yard::ActorDied*>(&e) || dynamic_cast<const yard::WorkerCrashed*>(&e) ||
      dynamic_cast<const yard::OwnerDied*>(&e))
    return true;
  if (auto* r = dynamic_cast<const yard::RemoteError*>(&e)) {
    // Raised on a survivor because a peer or the checkpointer went away.
    for (const char* t : {"ActorDied", "ActorRestarting", "WorkerCrashed", "OwnerDied", "CollectiveError"})
      if (r->remote_type().find(t) != std::string::npos) return true;
  }
  return false;
}

// An idempotent question to an actor (its pid, its node), asked again when the process answering
// it was lost (ActorRestarting: the actor is being restarted, and the question goes to the new
// process), up to `attempts` times; an actor out of restarts still fails with ActorDied.
template <class A, class M>
auto ask(const yard::ActorHandle<A>& actor, M method, int attempts = 4,
         std::chrono::seconds timeout = std::chrono::seconds(600)) {
  for (int attempt = 1;; ++attempt) {
    try {
      return *actor.call(method).remote().get(timeout);
    } catch (const yard::ActorRestarting&) {
      if (attempt >= attempts) throw;
    }
  }
}

}  // namespace railway_train
