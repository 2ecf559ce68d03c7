#include "elastic_trainers.h"

#include <cstdio>

namespace railway_train {

using namespace std::chrono_literals;
using yard::actors::ElasticGroup;

ElasticTrainers::ElasticTrainers(int min, int max, std::map<std::string, double> resources, std::string run,
                                 std::vector<yard::ActorHandle<yard::actors::Checkpointer>> ckpts, Report report)
    : min_(min), max_(max), resources_(std::move(resources)), run_(std::move(run)), ckpts_(std::move(ckpts)),
      report_(std::move(report)) {}

ElasticTrainers::~ElasticTrainers() {
  try {
    stop();
  } catch (const std::exception&) {
  }
}

int ElasticTrainers::world() const { return group_ ? group_->world() : 0; }

void ElasticTrainers::stop() { group_.reset(); }

// Applies what changed since the last chunk; waits (up to 10 minutes) while fewer than MIN
// trainers could train.
void ElasticTrainers::settle() {
  auto r = group_->settle(600s);
  if (!r) return;
  report_(*r);
  print_members();
}

void ElasticTrainers::print_members() const {
  std::string pids, nodes;
  for (int k = 0; k < group_->world(); ++k)
    pids += " " + std::to_string(group_->pid(k)), nodes += " " + group_->node(k);
  std::printf("trainer pids:%s\ntrainer nodes:%s\n", pids.c_str(), nodes.c_str());
  std::fflush(stdout);
}

SetupInfo ElasticTrainers::start(const TrainConfig& cfg) {
  stop();
  cfg_ = cfg;
  cfg_.min_workers = min_;
  ElasticGroup<RailwayTrainer>::Options o;
  o.name = run_;
  o.min = min_;
  o.max = max_;
  auto cks = ckpts_;
  auto c = cfg_;
  group_ = std::make_unique<ElasticGroup<RailwayTrainer>>(
      o,
      [res = resources_](const std::string& node) {
        auto make = yard::actor<RailwayTrainer>().resources(res);
        if (!node.empty()) make.node_affinity(node, true);  // where the job queue put the replica
        return make.remote();
      },
      [c, cks](const yard::ActorHandle<RailwayTrainer>& a) { return a.call(&RailwayTrainer::prepare).remote(c, cks); });
  std::printf("elastic group: %d to %d trainers; training starts when %d %s set up\n", min_, max_, min_,
              min_ == 1 ? "is" : "are");
  std::fflush(stdout);
  settle();
  return *group_->member(0).call(&RailwayTrainer::info).remote().get(600s);
}

std::vector<ChunkStats> ElasticTrainers::train(int64_t steps, bool save) {
  for (;;) {
    settle();
    auto out = group_->run<ChunkStats>(
        [&](const yard::ActorHandle<RailwayTrainer>& a, int) { return a.call(&RailwayTrainer::train_steps).remote(steps, save); },
        3600s);
    if (out.complete()) {
      std::vector<ChunkStats> all;
      for (auto& s : out.by_rank) all.push_back(std::move(*s));
      return all;
    }
    for (auto& l : out.lost)
      std::printf("a trainer was lost in training (%s); the survivors go on from their last completed step\n", l.c_str());
    std::fflush(stdout);
  }
}

// Evaluation and the final save use the members there are; membership changes wait for the next
// training step, unless a member is lost meanwhile.
int ElasticTrainers::evaluator_pid() const { return group_ && group_->world() > 0 ? group_->pid(0) : 0; }

EvalStats ElasticTrainers::evaluate() {
  for (;;) {
    auto out = group_->run<EvalStats>(
        [](const yard::ActorHandle<RailwayTrainer>& a, int rank) {
          // Rank 0 evaluates; the others answer at once (their replicas are the same).
          return rank == 0 ? a.call(&RailwayTrainer::evaluate).remote() : yard::put(EvalStats{});
        },
        600s);
    if (out.complete()) return *out.by_rank[0];
    settle();
  }
}

std::vector<std::string> ElasticTrainers::finish() {
  for (;;) {
    auto out = group_->run<std::vector<std::string>>(
        [](const yard::ActorHandle<RailwayTrainer>& a, int) { return a.call(&RailwayTrainer::finish).remote(); }, 600s);
    if (!out.complete()) {
      settle();
      continue;
    }
    std::vector<std::string> notes;
    for (auto& n : out.by_rank) notes.insert(notes.end(), n->begin(), n->end());
    return notes;
  }
}

}  // namespace railway_train
