#include "steppers.h"

#include <chrono>
#include <thread>

#include "yard/actors/parameter_server.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"

namespace railway_train {

namespace {

using namespace std::chrono_literals;

}  // namespace

yard::actors::LrSchedule schedule_of(const TrainConfig& cfg, int64_t global_batch, int64_t total_steps, int64_t warmup) {
  yard::actors::LrSchedule s;
  s.base_lr = cfg.base_lr;
  s.base_batch = cfg.base_batch;
  s.global_batch = global_batch;
  s.warmup_steps = warmup;
  s.decay = yard::actors::LrSchedule::parse(cfg.decay);
  s.total_steps = total_steps;
  s.final_fraction = cfg.min_lr_fraction;
  return s;
}

std::string note_of(const TrainConfig& cfg, const yard::actors::LrSchedule& s) {
  return cfg.decay + " " + std::to_string(s.total_steps) + " " + std::to_string(s.peak());
}

yard::actors::Regrouped Stepper::regroup(yard::collective::Communicator&, yard::actors::Regroup&) {
  throw std::invalid_argument("this strategy cannot train in an elastic group (--workers MIN:MAX): use --strategy ddp");
}

namespace {

// ddp and local-sgd: every replica has its optimizer; yard::actors::Trainer.
class DataParallel final : public Stepper {
 public:
  DataParallel(const TrainConfig& cfg, int world, int64_t steps_per_epoch, std::shared_ptr<torch::nn::Module> model,
               yard::collective::Communicator* comm)
      : cfg_(cfg) {
    yard::actors::TrainerOptions to;
    to.optimizer = cfg.optimizer;
    to.weight_decay = cfg.weight_decay;
    to.clip = cfg.clip;
    to.schedule = schedule_of(cfg, cfg.batch * world * cfg.accumulate, cfg.epochs * steps_per_epoch, cfg.warmup_steps);
    to.sync_every = cfg.strategy == "local-sgd" ? static_cast<int>(cfg.sync_every) : 0;
    trainer_ = std::make_unique<yard::actors::Trainer>(std::move(model), comm, to);
  }
  void begin(const std::optional<yard::actors::CheckpointData>& from) override {
    if (!from) return;
    yard::actors::load_state(trainer_->optimizer(), from->blobs.at("optimizer"));
    trainer_->set_global_step(static_cast<int64_t>(from->step));
  }
  double step(const StepBatches& b) override {
    return trainer_->step(b.sizes, b.loss_of);
  }
  double last_lr() const override { return trainer_->last_lr(); }
  int64_t global_step() const override { return trainer_->global_step(); }
  void synchronize() override { trainer_->synchronize(); }
  std::function<void(yard::actors::CheckpointData&)> checkpoint_parts() override {
    return [opt = yard::actors::StateSnapshot(trainer_->optimizer())](yard::actors::CheckpointData& c) {
      c.blobs["optimizer"] = opt.bytes();
    };
  }
  std::string schedule_note() const override { return note_of(cfg_, trainer_->schedule()); }
  yard::actors::Regrouped regroup(yard::collective::Communicator& comm, yard::actors::Regroup& r) override {
    return trainer_->regroup(comm, r);
  }
  void begin_busy() override { trainer_->begin_busy(); }
  std::optional<Busy> last_busy() const override {
    return Busy{trainer_->last_busy_s(), trainer_->last_wait_s(), trainer_->group_rates()};
  }

 private:
  TrainConfig cfg_;
  std::unique_ptr<yard::actors::Trainer> trainer_;
};

// ps: S server actors hold the parameters and the optimizer; this replica pushes gradients and
// pulls weights. Rank 0 makes the servers (named after the job and the group's generation) and
// sets them up, after ending those of the earlier generations; the other ranks find them by name.
class ParameterServers final : public Stepper {
 public:
  ParameterServers(const TrainConfig& cfg, int rank, int world, std::string generation, int64_t steps_per_epoch,
                   std::shared_ptr<torch::nn::Module> model,
                   const std::vector<yard::ActorHandle<yard::actors::Checkpointer>>& ckpts)
      : cfg_(cfg), rank_(rank), generation_(std::move(generation)) {
    auto mode = yard::actors::PsMode::parse(cfg.ps_mode);
    bool sync = mode.kind == yard::actors::PsMode::Kind::kSync;
    // Sync: one update per step of the global batch. Otherwise every push is an update of one
    // worker's batch: W times the updates, each at the rate for that batch.
    ps_.optimizer = cfg.optimizer;
    ps_.weight_decay = cfg.weight_decay;
    ps_.base_lr = cfg.base_lr;
    ps_.base_batch = cfg.base_batch;
    ps_.global_batch = cfg.batch * cfg.accumulate * (sync ? world : 1);
    ps_.warmup_steps = cfg.warmup_steps * (sync ? 1 : world);
    ps_.decay = cfg.decay;
    ps_.total_steps = cfg.epochs * steps_per_epoch * (sync ? 1 : world);
    ps_.final_fraction = cfg.min_lr_fraction;
    ps_.mode = cfg.ps_mode;
    ps_.workers = world;
    schedule_ = ps_.schedule();
    // An impossible split is refused before any server starts.
    std::vector<int64_t> sizes;
    for (auto& p : model->parameters()) sizes.push_back(p.numel());
    (void)yard::actors::plan_shards(sizes, static_cast<int>(cfg.ps_servers));
    // Rank 0 makes the servers, unless it replaces a lost rank 0 in a running group (cfg.join).
    bool maker = rank == 0 && !cfg.join;
    if (maker)
      for (auto& old : cfg.retired_generations) end_servers(old);
    // A server that is lost restarts in place (up to --ps-restarts times) and takes its shard back
    // from the newest checkpoint that holds it; the trainers carry on against it.
    std::vector<yard::ActorHandle<yard::actors::ParameterServer>> servers;
    for (int64_t i = 0; i < cfg.ps_servers; ++i) {
      if (!maker) {
        servers.push_back(find(name(generation_, i)));
        continue;
      }
      yard::actors::PsRecovery rec{ps_, ckpts, shard_blob(i)};
      servers.push_back(yard::actor<yard::actors::ParameterServer>(std::move(rec))
                            .name(name(generation_, i))
                            .max_concurrency(world + 2, yard::Concurrency::kFibers)
                            .max_restarts(static_cast<int>(cfg.ps_restarts))
                            .remote());
    }
    client_ = std::make_unique<yard::actors::ParameterClient>(std::move(model), std::move(servers), rank, cfg.clip);
  }
  void begin(const std::optional<yard::actors::CheckpointData>& from) override {
    if (cfg_.join) {
      // In a lost trainer's place: its weights and its step from the servers, at once (a sync
      // pull would wait for the very step this trainer is to push). Where no server can tell, it
      // goes on from the step the group's chunk began at: steps the servers have are dropped.
      if (client_->join() < 0) client_->set_steps(cfg_.join_step);
      pulled_ = true;
      return;
    }
    client_->set_steps(from ? static_cast<int64_t>(from->step) : 0);  // pushes carry the job's step
    if (rank_ != 0) return;  // the weights come with the first pull
    if (!from) {
      client_->initialise(ps_);
      return;
    }
    std::vector<std::string> shards;
    for (int64_t i = 0; from->blobs.count(shard_blob(i)); ++i) shards.push_back(from->blobs.at(shard_blob(i)));
    if (shards.empty())
      throw std::invalid_argument("the checkpoint of step " + std::to_string(from->step) +
                                  " was not made by parameter servers (--strategy ps): it holds no server shards");
    client_->restore(ps_, shards);
  }
  double step(const StepBatches& b) override {
    if (!pulled_) client_->pull();  // the servers' weights (set up, or restored, by rank 0)
    pulled_ = true;
    double loss = client_->step(b.sizes, b.loss_of);
    lr_ = schedule_.at(std::max<int64_t>(0, client_->last().version - 1));
    return loss;
  }
  double last_lr() const override { return lr_; }
  int64_t global_step() const override { return client_->steps(); }
  std::function<void(yard::actors::CheckpointData&)> checkpoint_parts() override {
    auto shards = client_->snapshots();
    return [shards = std::move(shards)](yard::actors::CheckpointData& c) {
      c.blobs["optimizer"] = "";  // it lives on the servers: the shards below
      for (size_t i = 0; i < shards.size(); ++i) c.blobs[shard_blob(static_cast<int64_t>(i))] = shards[i];
    };
  }
  std::string schedule_note() const override { return note_of(cfg_, schedule_) + " ps " + cfg_.ps_mode; }
  Staleness last_staleness() const override { return {client_->last().max_ahead, client_->last().max_stale_updates}; }
  std::vector<int> helper_pids() override { return rank_ == 0 ? client_->server_pids() : std::vector<int>{}; }
  std::vector<HelperRestart> helper_restarts() override {
    std::vector<HelperRestart> out;
    for (auto& [i, r] : client_->take_restarts()) {
      HelperRestart h;
      h.what = "parameter server " + std::to_string(i);
      h.pid = r.pid;
      h.restarts = r.restarts;
      h.restored = "its shard came back from the checkpoint of step " + std::to_string(r.step) + " (" +
                   std::to_string(r.version) + " updates); the trainers carried on, the other shards kept their updates";
      h.seconds = r.seconds;
      out.push_back(std::move(h));
    }
    return out;
  }
  void finish() override {
    if (rank_ == 0) end_servers(generation_);
  }

 private:
  static std::string shard_blob(int64_t i) { return "ps-shard-" + std::to_string(i); }
  static std::string name(const std::string& generation, int64_t i) {
    return "railway-ps-" + yard::job_id() + "-" + generation + "-" + std::to_string(i);
  }
  void end_servers(const std::string& generation) {
    for (int64_t i = 0; i < cfg_.ps_servers; ++i) {
      try {
        yard::kill(yard::get_actor<yard::actors::ParameterServer>(name(generation, i)));
      } catch (const yard::Error&) {
        // never made (that generation failed before), or already gone
      }
    }
  }
  static yard::ActorHandle<yard::actors::ParameterServer> find(const std::string& name) {
    auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
      try {
        return yard::get_actor<yard::actors::ParameterServer>(name);
      } catch (const yard::NotFoundError&) {
        if (std::chrono::steady_clock::now() > deadline)
          throw yard::TimeoutError("parameter server " + name + " was not made by rank 0 within 120 s");
        std::this_thread::sleep_for(50ms);  // rank 0 makes it during its set-up
      }
    }
  }

  TrainConfig cfg_;
  int rank_;
  std::string generation_;
  yard::actors::LrSchedule schedule_;
  yard::actors::PsShardConfig ps_;
  std::unique_ptr<yard::actors::ParameterClient> client_;
  bool pulled_ = false;
  double lr_ = 0;
};

}  // namespace

std::unique_ptr<Stepper> make_stepper(const TrainConfig& cfg, int rank, int world, const std::string& generation,
                                      int64_t steps_per_epoch, RailwayNet model, const ModelMaker& make,
                                      yard::collective::Communicator* comm,
                                      const std::vector<yard::ActorHandle<yard::actors::Checkpointer>>& ckpts) {
  if (cfg.strategy == "ps")
    return std::make_unique<ParameterServers>(cfg, rank, world, generation, steps_per_epoch, model.ptr(), ckpts);
  if (cfg.strategy == "pipeline")
    return make_pipeline_stepper(cfg, layout_of(cfg, rank, world), generation, steps_per_epoch, make);
  return std::make_unique<DataParallel>(cfg, world, steps_per_epoch, model.ptr(), comm);
}

}  // namespace railway_train
