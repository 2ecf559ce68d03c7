// TrainerGroup: the job's data-parallel replicas, started in the trainers' placement group and
// driven together. Every operation waits for all members but fails fast: the first member lost
// ends it with MemberLost (which rank, its pid, the phase, the error), without waiting for the
// survivors to time out in a collective. start() kills whatever is left of the previous members
// and sets up new ones in a new collective generation.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "job_types.h"
#include "railway_trainer.h"
#include "recovery.h"
#include "yard/actors/batch_queue.h"

namespace railway_train {

class MemberLost : public yard::Error {
 public:
  MemberLost(Phase phase, std::string who, const std::string& error)
      : yard::Error(who + " was lost in " + phase_name(phase) + ": " + error), phase(phase), who(std::move(who)),
        error(error) {}
  Phase phase;
  std::string who;    // "trainer rank 1 (pid 123)"
  std::string error;  // what the driver saw
};

// The job's trainers, one implementation per kind of group: a fixed number of them in a placement
// group (TrainerGroup), or an elastic group between MIN and MAX (ElasticTrainers).
class Trainers {
 public:
  virtual ~Trainers() = default;
  // Members set up (from the checkpointers' newest checkpoint with cfg.resume).
  virtual SetupInfo start(const TrainConfig& cfg) = 0;
  // A chunk of steps on every member: each member's stats.
  virtual std::vector<ChunkStats> train(int64_t steps, bool save) = 0;
  virtual EvalStats evaluate() = 0;
  virtual std::vector<std::string> finish() = 0;
  virtual void stop() = 0;
  virtual int world() const = 0;
  // The process that evaluates (rank 0), for the progress report.
  virtual int evaluator_pid() const = 0;
};

class TrainerGroup : public Trainers {
 public:
  TrainerGroup(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
               std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts);
  ~TrainerGroup() override;

  // New members, set up (from the checkpointer's newest checkpoint with cfg.resume). Prints the
  // members' pids as soon as they are up and their nodes once set up.
  SetupInfo start(const TrainConfig& cfg) override;
  std::vector<ChunkStats> train(int64_t steps, bool save) override;
  EvalStats evaluate() override;
  std::vector<std::string> finish() override;
  void stop() override;
  int world() const override { return workers_; }
  int evaluator_pid() const override { return pids_.empty() ? 0 : pids_[0]; }

 protected:
  // Whether a member's loss (rank, what was seen) is taken care of instead of ending the wait; it
  // may put a new ref in the lost one's place in gather's refs (a replacement's work).
  using Tolerate = std::function<bool(int, const std::exception&)>;
  template <class T>
  std::vector<std::optional<T>> gather(std::vector<yard::ObjectRef<T>>& refs, const std::vector<int>& ranks,
                                       Phase phase, yard::Duration timeout, const Tolerate& tolerate);
  template <class T>
  std::vector<T> collect(const std::vector<yard::ObjectRef<T>>& refs, const std::vector<int>& ranks, Phase phase,
                         yard::Duration timeout);
  std::string who(int rank) const;
  std::string pid_list() const;  // " 123 456": the members' pids

  int workers_;
  std::map<std::string, double> resources_;  // each member's (a bundle of the placement group)
  yard::PlacementGroup pg_;
  std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts_;
  std::vector<yard::ActorHandle<RailwayTrainer>> members_;
  std::vector<int> pids_;
  std::vector<std::string> generations_;  // every group generation started, oldest first
  int evaluators_ = 1;  // the ranks an evaluation runs on: rank 0, or the first pipeline's stages
};

// Asynchronous parameter servers with batches on request (ps async): no trainer waits for another,
// so a lost one is replaced without stopping the others. The survivors train the chunk on (taking
// the lost one's batches, its claimed batch handed out again); a new trainer in the lost one's
// bundle sets up meanwhile, taking the weights from the servers, and joins at the first chunk
// after it is ready. Rank 0 (checkpoints, evaluation) is waited for when it is the one replaced.
// Every replacement is handed to the job's report once the new trainer has joined. A rank lost more
// than max_replacements times (a batch that crashes whoever trains it, say) ends the chunk with
// MemberLost instead, for the job's restart budget to decide.
class ReplacingTrainers final : public TrainerGroup {
 public:
  ReplacingTrainers(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
                    std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts,
                    yard::ActorHandle<yard::actors::BatchQueue> queue, int max_replacements, RecoveryReport report);
  SetupInfo start(const TrainConfig& cfg) override;
  std::vector<ChunkStats> train(int64_t steps, bool save) override;
  ~ReplacingTrainers() override;
  EvalStats evaluate() override;
  std::vector<std::string> finish() override;
  void stop() override;

 private:
  struct Replacement {
    yard::ActorHandle<RailwayTrainer> member;
    yard::ObjectRef<SetupInfo> ready;
    std::string lost, error;  // who was lost and what the driver saw
    std::chrono::steady_clock::time_point since;
  };
  void replace(int rank, const std::string& error);
  // Replacements whose set-up finished join (all of them, waiting, with wait_all; rank 0's always).
  void adopt(bool wait_all);

  yard::ActorHandle<yard::actors::BatchQueue> queue_;
  int max_replacements_;           // per rank: more losses than this go to the job's group restart
  std::map<int, int> replaced_;    // rank -> replacements so far
  RecoveryReport report_;
  TrainConfig cfg_;
  std::map<int, Replacement> pending_;  // rank -> its replacement setting up
};

// Parameter servers with fixed shares (sync, ssp:K, async without batches on request): a lost
// trainer's share of the chunk is taken up by a new trainer in its bundle from the step the
// servers lack from it, so the step it was in is redone and no other work is (sync: the others wait
// for it at that step; ssp:K and async: they train on, under ssp:K up to K steps ahead). The new
// trainer takes its weights and its step from the servers and its data position from that step.
// A rank lost more than max_replacements times ends the chunk with MemberLost, for the job's
// restart budget to decide.
class RedoingTrainers final : public TrainerGroup {
 public:
  RedoingTrainers(int workers, std::map<std::string, double> resources, yard::PlacementGroup pg,
                  std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts, int max_replacements,
                  RecoveryReport report);
  SetupInfo start(const TrainConfig& cfg) override;
  std::vector<ChunkStats> train(int64_t steps, bool save) override;

 private:
  // The lost rank's replacement, set up (waited for): its work for the rest of the chunk to `end`.
  yard::ObjectRef<ChunkStats> redo(int rank, const std::string& error, int64_t end, bool save);

  int max_replacements_;
  std::map<int, int> replaced_;  // rank -> replacements so far
  RecoveryReport report_;
  TrainConfig cfg_;
  int64_t at_ = 0;  // the global step the next chunk begins at
};

}  // namespace railway_train
