// ElasticTrainers: the job's trainers as an elastic group (`railway-train --workers MIN:MAX`).
// Training starts as soon as MIN trainers are placed and set up; between chunks of steps the
// group takes in trainers that found room (up to MAX), lets go of those on draining nodes, and
// goes on without lost ones, from the survivors' memory (yard::actors::ElasticGroup). Every change
// is handed to the job's report; a loss never restarts the survivors.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer_group.h"

namespace railway_train {

class ElasticTrainers final : public Trainers {
 public:
  using Report = std::function<void(const yard::actors::ElasticResize&)>;
  ElasticTrainers(int min, int max, std::map<std::string, double> resources, std::string run,
                  std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts, Report report);
  ~ElasticTrainers() override;

  SetupInfo start(const TrainConfig& cfg) override;
  std::vector<ChunkStats> train(int64_t steps, bool save) override;
  EvalStats evaluate() override;
  std::vector<std::string> finish() override;
  void stop() override;
  int world() const override;
  int evaluator_pid() const override;

 private:
  void settle();
  void print_members() const;  // "trainer pids: ..." and "trainer nodes: ..."

  int min_, max_;
  std::map<std::string, double> resources_;  // each trainer's
  std::string run_;
  std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts_;
  Report report_;
  TrainConfig cfg_;
  std::unique_ptr<yard::actors::ElasticGroup<RailwayTrainer>> group_;
};

}  // namespace railway_train
