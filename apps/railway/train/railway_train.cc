// railway-train: the railway model trained data-parallel on a Switchyard cluster.
//
//   railway-train [--data DIR] [--workers N] [--epochs E] [--out DIR] ...
//
// The driver makes sure training shards exist (Aligner actors, placed on the nodes that hold the
// logs, turn one log into shards per call), starts a Checkpointer actor and N trainer actors in a
// placement group that form a collective group, and runs the epochs in chunks of steps: each
// trainer takes its batches from a prefetching DataLoader (its shard of every epoch), gradients
// are all-reduced in buckets during backward, the learning rate follows the linear-scaling rule
// with warm-up and a cosine decay. Rank 0 hands a snapshot (model, optimizer, schedule step,
// data-loader position) to the Checkpointer every --checkpoint-every steps and at every epoch's
// end and trains on while it is written. After every epoch the model is evaluated on a held-out
// stretch of track. Progress (epoch, step, loss, samples/s, ETA) is printed as it runs; per-step
// metrics go to steps.jsonl, per-epoch ones to metrics.jsonl, curves to curves.svg. A lost
// trainer (crash, kill -9, dead node) restarts the group from the newest checkpoint.
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include <CLI/CLI.hpp>

#include "make_shards.h"
#include "train_metrics.h"
#include "yard/railway/model.h"
#include "yard/actors/checkpointer.h"
#include "yard/actors/data_loader.h"
#include "yard/actors/ddp.h"
#include "yard/actors/sampler.h"
#include "yard/actors/schedule.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"
#include "yard/collective.h"
#include "yard/railway/plot.h"
#include "yard/railway/shards.h"
#include "yard/railway/sim.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using yard::actors::Checkpointer;

struct TrainConfig {
  std::string data;            // directory of shard directories (or one)
  int64_t d_model = 64, layers = 2, heads = 4;
  int64_t batch = 32;          // per worker
  double base_lr = 1e-3;       // for base_batch
  int64_t base_batch = 32;
  int64_t warmup_steps = 20;
  std::string decay = "cosine";  // after warm-up: cosine (to min_lr_fraction at the last step) or constant
  double min_lr_fraction = 0.0;
  int64_t epochs = 6;          // the schedule's length
  std::string optimizer = "adamw";  // or sgd (momentum 0.9)
  double weight_decay = 1e-4;
  double holdout = 0.2;        // the last fraction of every line's chainage is the validation track
  uint64_t seed = 17;
  double clip = 1.0;
  bool balanced = true;        // class-balanced epochs (defect windows are rare)
  bool resume = false;         // start from the newest complete checkpoint, if any
  int64_t prefetch = 2;        // batches the data loader makes ahead
  int64_t accumulate = 1;      // micro-batches per optimizer step (gradients accumulated locally, no_sync)
  YARD_FIELDS(data, d_model, layers, heads, batch, base_lr, base_batch, warmup_steps, decay, min_lr_fraction, epochs,
              optimizer, weight_decay, holdout, seed, clip, balanced, resume, prefetch, accumulate);
};

// What a chunk of steps did on one rank: per step, the loss summed over its samples and the count.
struct ChunkStats {
  std::vector<double> loss_sum;
  std::vector<int64_t> samples;
  uint64_t epoch = 0, step = 0;  // the data loader's position after the chunk
  int64_t global_step = 0;
  double lr = 0;
  double seconds = 0;
  double checkpoint_ms = 0;  // training time the checkpoint hand-over took (rank 0, when it saved)
  YARD_FIELDS(loss_sum, samples, epoch, step, global_step, lr, seconds, checkpoint_ms);
};

struct EvalStats {
  double loss = 0, accuracy = 0, macro_f1 = 0, amplitude_rmse = 0;
  int64_t samples = 0;
  YARD_FIELDS(loss, accuracy, macro_f1, amplitude_rmse, samples);
};

// ---- data -------------------------------------------------------------------------------------------

struct Split {
  torch::Tensor x, label, amp;
};

// Loads every shard under dir; windows in the last `holdout` of each line's chainage go to val.
std::pair<Split, Split> load_data(const std::string& dir, double holdout) {
  std::vector<std::vector<yard::railway::Window>> per_dir;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    const auto& e = *it;
    if (e.is_directory() && e.path().filename() == "unaligned" && e.path().parent_path() == fs::path(dir)) {
      it.disable_recursion_pending();  // the baseline's shards are not training data of the aligned run
      continue;
    }
    if (e.path().filename() != "manifest.json") continue;
    std::vector<yard::railway::Window> ws;
    for (auto& f : fs::directory_iterator(e.path().parent_path()))
      if (f.path().extension() == ".bin") {
        auto part = yard::railway::read_shard(f.path().string());
        ws.insert(ws.end(), part.begin(), part.end());
      }
    per_dir.push_back(std::move(ws));
  }
  if (per_dir.empty()) throw std::runtime_error("no shards (manifest.json) under " + dir);
  std::vector<const yard::railway::Window*> tr, va;
  for (auto& ws : per_dir) {
    double end = 0;
    for (auto& w : ws) end = std::max(end, w.start_chainage);
    for (auto& w : ws) (w.start_chainage < (1 - holdout) * end ? tr : va).push_back(&w);
  }
  auto pack = [](const std::vector<const yard::railway::Window*>& v) {
    Split s;
    int64_t n = static_cast<int64_t>(v.size()), T = static_cast<int64_t>(v[0]->x.size() / yard::railway::kFeatures);
    s.x = torch::empty({n, T, yard::railway::kFeatures});
    s.label = torch::empty({n}, torch::kLong);
    s.amp = torch::empty({n});
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(s.x[i].data_ptr<float>(), v[i]->x.data(), v[i]->x.size() * sizeof(float));
      s.label[i] = static_cast<int64_t>(v[i]->label);
      s.amp[i] = v[i]->amplitude_mm;
    }
    return s;
  };
  auto train = pack(tr), val = pack(va);
  // Normalise features with the training statistics.
  auto mu = train.x.mean(std::vector<int64_t>{0, 1}, true);
  auto sd = train.x.std(std::vector<int64_t>{0, 1}, true, true) + 1e-6;
  train.x = (train.x - mu) / sd;
  val.x = (val.x - mu) / sd;
  return {train, val};
}

// ---- the trainer actor ------------------------------------------------------------------------------

struct Batch {
  torch::Tensor x, label, amp;
};

class RailwayTrainer {
 public:
  RailwayTrainer() = default;

  // Loads the data, builds the replica, joins the group, makes the replicas identical; with
  // cfg.resume, continues from the checkpointer's newest complete checkpoint. Returns the number
  // of training windows.
  int64_t setup(TrainConfig cfg, int rank, int world, std::string generation, yard::ActorHandle<Checkpointer> ckpt) {
    torch::set_num_threads(1);
    yard::actors::keep_freed_memory();
    cfg_ = cfg;
    rank_ = rank;
    world_ = world;
    ckpt_ = ckpt;
    auto [train, val] = load_data(cfg.data, cfg.holdout);
    train_ = train;
    val_ = val;
    torch::manual_seed(cfg.seed);
    net_ = RailwayNet(yard::railway::kFeatures, train_.x.size(1), cfg.d_model, cfg.layers, cfg.heads);
    comm_ = yard::collective::create_group(yard::collective::cluster_group("railway-train", world, rank, generation));
    yard::actors::DistributedSampler sampler(train_.x.size(0), world, rank, cfg.seed);
    if (cfg.balanced) {
      auto l = train_.label.contiguous();
      sampler.set_class_balanced(std::vector<int>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel()));
    }
    loader_ = std::make_unique<yard::actors::DataLoader<Batch>>(
        sampler, static_cast<uint64_t>(cfg.batch),
        [this](const std::vector<uint64_t>& idx) {
          Batch b;
          if (idx.empty()) return b;
          auto ix = torch::tensor(std::vector<int64_t>(idx.begin(), idx.end()), torch::kLong);
          b.x = train_.x.index_select(0, ix);
          b.label = train_.label.index_select(0, ix);
          b.amp = train_.amp.index_select(0, ix);
          return b;
        },
        static_cast<size_t>(std::max<int64_t>(1, cfg.prefetch)));
    if (cfg.accumulate < 1) throw std::invalid_argument("accumulate must be at least 1");
    // The replica's optimizer step: identical start (broadcast from rank 0), DDP, clipping, AdamW
    // or SGD at the linearly scaled, warmed-up, decaying rate.
    yard::actors::TrainerOptions to;
    to.optimizer = cfg.optimizer;
    to.weight_decay = cfg.weight_decay;
    to.clip = cfg.clip;
    to.schedule.base_lr = cfg.base_lr;
    to.schedule.base_batch = cfg.base_batch;
    to.schedule.global_batch = cfg.batch * world * cfg.accumulate;
    to.schedule.warmup_steps = cfg.warmup_steps;
    to.schedule.decay = yard::actors::LrSchedule::parse(cfg.decay);
    to.schedule.total_steps = cfg.epochs * steps_per_epoch();
    to.schedule.final_fraction = cfg.min_lr_fraction;
    trainer_ = std::make_unique<yard::actors::Trainer>(net_.ptr(), comm_.get(), to);
    // Without balanced epochs, class weights against the imbalance: inverse square root of frequency.
    auto counts = torch::bincount(train_.label, {}, 5).to(torch::kFloat) + 1;
    class_w_ = cfg.balanced ? torch::ones({5}) : (counts.sum() / counts).sqrt();
    class_w_ = class_w_ / class_w_.mean();
    if (cfg.resume) {
      // Every rank reads the same newest complete checkpoint: identical replicas, optimizers,
      // schedules and data-loader positions.
      if (auto c = *ckpt_.call(&Checkpointer::restore).remote().get(600s)) {
        yard::actors::load_state(*net_, c->blobs.at("model"));
        yard::actors::load_state(trainer_->optimizer(), c->blobs.at("optimizer"));
        trainer_->set_global_step(static_cast<int64_t>(c->step));
        loader_->seek(yard::actors::DataLoader<Batch>::decode(c->blobs.at("loader")));
      }
    }
    return train_.x.size(0);
  }

  // Optimizer steps per epoch: the loader's batches, `accumulate` at a time.
  int64_t steps_per_epoch() {
    return (static_cast<int64_t>(loader_->steps_per_epoch()) + cfg_.accumulate - 1) / cfg_.accumulate;
  }
  // Where the next chunk starts: the epoch and optimizer step in it.
  std::vector<uint64_t> position() {
    auto p = loader_->position();
    return {p.epoch, p.step / static_cast<uint64_t>(cfg_.accumulate)};
  }
  int pid() { return getpid(); }
  std::string node() { return yard::node_id(); }

  // Trains `steps` steps (fewer if the epoch ends first). With `checkpoint`, rank 0 then hands a
  // snapshot to the checkpointer and returns without waiting for the write.
  ChunkStats train_steps(int64_t steps, bool checkpoint) {
    ChunkStats st;
    auto t0 = std::chrono::steady_clock::now();
    net_->train();
    uint64_t epoch = loader_->position().epoch;
    for (int64_t s = 0; s < steps && loader_->position().epoch == epoch; ++s) {
      // Up to `accumulate` micro-batches of this epoch make one step.
      std::vector<yard::actors::DataLoader<Batch>::Item> micro;
      do micro.push_back(loader_->next());
      while (static_cast<int64_t>(micro.size()) < cfg_.accumulate && loader_->position().epoch == epoch);
      std::vector<int64_t> sizes;
      int64_t local = 0;
      for (auto& m : micro) sizes.push_back(static_cast<int64_t>(m.indices.size())), local += sizes.back();
      double loss_sum = trainer_->step(sizes, [&](size_t i) {
        const auto& b = micro[i].batch;
        auto [logits, amp] = net_->forward(b.x);
        return torch::nn::functional::cross_entropy(logits, b.label,
                                                    torch::nn::functional::CrossEntropyFuncOptions().weight(class_w_)) +
               torch::mse_loss(amp, b.amp);
      });
      st.lr = trainer_->last_lr();
      st.loss_sum.push_back(loss_sum);
      st.samples.push_back(local);
    }
    auto pos = loader_->position();
    st.epoch = pos.epoch;
    st.step = pos.step / static_cast<uint64_t>(cfg_.accumulate);
    st.global_step = trainer_->global_step();
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (checkpoint && rank_ == 0) {
      auto c0 = std::chrono::steady_clock::now();
      // The previous write has long finished; a failure surfaces here rather than being lost.
      if (pending_.valid()) pending_.get();
      // On this thread only copies of the tensors; serialising them and the call that hands the
      // bytes to the checkpointer run beside training.
      yard::actors::CheckpointData c;
      c.step = static_cast<uint64_t>(trainer_->global_step());
      c.blobs["loader"] = yard::actors::DataLoader<Batch>::encode(pos);
      c.blobs["schedule"] = cfg_.decay + " " + std::to_string(trainer_->schedule().total_steps) + " " +
                           std::to_string(trainer_->schedule().peak());
      pending_ = std::async(std::launch::async, [c = std::move(c), ckpt = ckpt_, model = yard::actors::StateSnapshot(*net_),
                                                 opt = yard::actors::StateSnapshot(trainer_->optimizer())]() mutable {
        yard::actors::make_background_thread();
        c.blobs["model"] = model.bytes();
        c.blobs["optimizer"] = opt.bytes();
        return *ckpt.call(&Checkpointer::save).remote(std::move(c)).get(600s);
      });
      st.checkpoint_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    }
    return st;
  }

  EvalStats evaluate() {
    torch::NoGradGuard ng;
    net_->eval();
    EvalStats ev;
    auto [logits, amp] = net_->forward(val_.x);
    ev.loss = (torch::nn::functional::cross_entropy(logits, val_.label) + torch::mse_loss(amp, val_.amp)).item<double>();
    auto pred = logits.argmax(1);
    ev.accuracy = pred.eq(val_.label).to(torch::kFloat).mean().item<double>();
    ev.amplitude_rmse = (amp - val_.amp).pow(2).mean().sqrt().item<double>();
    double f1 = 0;
    int classes = 0;
    for (int c = 0; c < 5; ++c) {
      double tp = (pred.eq(c) & val_.label.eq(c)).sum().item<double>();
      double fp = (pred.eq(c) & val_.label.ne(c)).sum().item<double>();
      double fn = (pred.ne(c) & val_.label.eq(c)).sum().item<double>();
      if (tp + fn == 0) continue;  // a class absent from the held-out track
      f1 += tp == 0 ? 0 : 2 * tp / (2 * tp + fp + fn);
      ++classes;
    }
    ev.macro_f1 = classes ? f1 / classes : 0;
    ev.samples = val_.x.size(0);
    return ev;
  }

  // Waits for the last checkpoint write and leaves the group.
  int finish() {
    if (pending_.valid()) pending_.get();
    comm_->destroy();
    return 0;
  }

 private:
  TrainConfig cfg_;
  int rank_ = 0, world_ = 1;
  Split train_, val_;
  RailwayNet net_{nullptr};
  std::unique_ptr<yard::collective::Communicator> comm_;
  std::unique_ptr<yard::actors::Trainer> trainer_;
  std::unique_ptr<yard::actors::DataLoader<Batch>> loader_;
  yard::ActorHandle<Checkpointer> ckpt_;
  std::future<std::string> pending_;  // the last checkpoint's hand-over: the file's path
  torch::Tensor class_w_;
};
YARD_ACTOR(RailwayTrainer, yard::ctor<>, &RailwayTrainer::setup, &RailwayTrainer::train_steps, &RailwayTrainer::evaluate,
           &RailwayTrainer::finish, &RailwayTrainer::steps_per_epoch, &RailwayTrainer::position, &RailwayTrainer::pid,
           &RailwayTrainer::node);

// ---- the driver -------------------------------------------------------------------------------------

int main(int argc, char** argv) {
  {
    // An embedded cluster (no --address / YARD_ADDRESS) offers a CPU per trainer and two more for
    // the checkpointer and aligners, even on a smaller machine: like torchrun, it oversubscribes
    // rather than waiting for CPUs that will never come. A real cluster offers what its nodes have.
    yard::InitOptions o;
    int want = 2;
    for (int i = 1; i + 1 < argc; ++i)
      if (std::string(argv[i]) == "--workers") want = std::max(want, std::atoi(argv[i + 1]));
    o.num_cpus = std::max(static_cast<int>(std::thread::hardware_concurrency()), want + 2);
    yard::init(o, argc, argv);
  }
  CLI::App app{"Train the railway defect model data-parallel on a Switchyard cluster.", "railway-train"};
  TrainConfig cfg;
  std::string data = "railway-data", out = "railway-out";
  int workers = 2, epochs = 6, logs = 2;
  int64_t checkpoint_every = 100, keep = 3;
  double length_km = 25;
  app.add_option("--data", data, "data directory: logs and shards (made when missing)")->default_val("railway-data");
  app.add_option("--out", out, "metrics, curves and checkpoints")->default_val("railway-out");
  app.add_option("--workers", workers, "trainer actors (data-parallel replicas)")->default_val(2)->check(CLI::Range(1, 64));
  app.add_option("--epochs", epochs, "epochs")->default_val(6)->check(CLI::Range(1, 1000));
  std::string placement = "PACK";
  app.add_option("--placement", placement, "how the trainers' placement group lays them out over the nodes")
      ->default_val("PACK")
      ->check(CLI::IsMember({"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}));
  app.add_option("--logs", logs, "simulated logs (trains) to make when data is missing")->default_val(2);
  app.add_option("--length-km", length_km, "line length of each simulated log")->default_val(25);
  app.add_option("--batch", cfg.batch, "batch per worker")->default_val(32);
  app.add_option("--lr", cfg.base_lr, "learning rate for a global batch of --base-batch")->default_val(1e-3);
  app.add_option("--base-batch", cfg.base_batch, "the batch --lr is meant for")->default_val(32);
  app.add_option("--warmup-steps", cfg.warmup_steps, "steps of linear warm-up to the scaled rate")->default_val(20);
  app.add_option("--decay", cfg.decay, "after warm-up: cosine (to --min-lr-fraction at the last step) or constant")
      ->default_val("cosine")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--min-lr-fraction", cfg.min_lr_fraction, "the cosine's end, as a fraction of the scaled rate")->default_val(0.0);
  app.add_option("--optimizer", cfg.optimizer, "adamw or sgd (momentum 0.9)")->default_val("adamw")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--d-model", cfg.d_model, "model width")->default_val(64);
  app.add_option("--layers", cfg.layers, "encoder layers")->default_val(2);
  app.add_option("--seed", cfg.seed, "seed")->default_val(17);
  app.add_option("--prefetch", cfg.prefetch, "batches each data loader makes ahead")->default_val(2);
  app.add_option("--accumulate", cfg.accumulate, "micro-batches of --batch per optimizer step (the global batch grows with it)")
      ->default_val(1)
      ->check(CLI::Range(1, 1024));
  app.add_option("--checkpoint-every", checkpoint_every, "steps between checkpoints (and one at every epoch's end)")->default_val(100);
  app.add_option("--keep", keep, "checkpoints kept")->default_val(3);
  bool unbalanced = false, unaligned = false;
  app.add_flag("--unaligned", unaligned, "train on shards made without alignment (the baseline the aligner is measured against)");
  app.add_flag("--unbalanced", unbalanced, "plain epochs (every window once) instead of class-balanced ones");
  CLI11_PARSE(app, argc, argv);
  cfg.balanced = !unbalanced;
  cfg.epochs = epochs;

  try {
    fs::create_directories(out);
    // 1. Shards.
    make_shards(data, logs, length_km, unaligned);
    cfg.data = fs::absolute(unaligned ? data + "/unaligned" : data).string();

    // 2. The checkpointer, on this node (where --out is). Each run keeps its own checkpoints: a
    // restart resumes this run, never an older one.
    std::string run = "run-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count() / 1000000);
    std::string ckpt_dir = fs::absolute(out + "/checkpoints/" + run).string();
    auto ckpt = yard::actor<Checkpointer>(ckpt_dir, keep, "railway-" + run)
                    .node_affinity(yard::node_id(), true)
                    .max_restarts(-1)
                    .remote();

    // 3. Trainers: a placement group reserves a CPU per trainer, all or nothing (a lost node's
    // bundles are placed again by the cluster); a group of `workers` replicas runs in it (again,
    // from the newest checkpoint, after a loss).
    static const std::map<std::string, yard::PlacementStrategy> strategies{
        {"PACK", yard::PlacementStrategy::kPack}, {"SPREAD", yard::PlacementStrategy::kSpread},
        {"STRICT_PACK", yard::PlacementStrategy::kStrictPack}, {"STRICT_SPREAD", yard::PlacementStrategy::kStrictSpread}};
    auto pg = yard::placement_group(std::vector<yard::Bundle>(static_cast<size_t>(workers), yard::Bundle{{"CPU", 1}}),
                                    strategies.at(placement), "railway-trainers");
    if (!pg.wait(600s)) throw yard::Error("the trainers' placement group was not placed within 10 minutes");
    std::vector<yard::ActorHandle<RailwayTrainer>> trainers;
    int64_t n_train = 0, spe = 0;
    uint64_t epoch = 0, step = 0;
    auto start_group = [&](bool resume) {
      for (auto& t : trainers) {
        try {
          yard::kill(t);
        } catch (const std::exception&) {
        }
      }
      trainers.clear();
      for (int r = 0; r < workers; ++r)
        trainers.push_back(yard::actor<RailwayTrainer>().resources({{"CPU", 1}}).placement_group(pg, r).remote());
      std::string gen = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
      auto c = cfg;
      c.resume = resume;
      std::vector<yard::ObjectRef<int64_t>> ready;
      for (int r = 0; r < workers; ++r) ready.push_back(trainers[r].call(&RailwayTrainer::setup).remote(c, r, workers, gen, ckpt));
      n_train = *ready[0].get(600s);
      for (auto& x : ready) x.get(600s);
      spe = *trainers[0].call(&RailwayTrainer::steps_per_epoch).remote().get(60s);
      auto pos = *trainers[0].call(&RailwayTrainer::position).remote().get(60s);
      epoch = pos[0];
      step = pos[1];
      std::string pids, nodes;
      for (auto& t : trainers) {
        pids += " " + std::to_string(*t.call(&RailwayTrainer::pid).remote().get(60s));
        nodes += " " + *t.call(&RailwayTrainer::node).remote().get(60s);
      }
      std::printf("trainer pids:%s\ntrainer nodes:%s\n", pids.c_str(), nodes.c_str());
    };
    start_group(false);
    yard::actors::LrSchedule sched;
    sched.base_lr = cfg.base_lr;
    sched.base_batch = cfg.base_batch;
    sched.global_batch = cfg.batch * workers * cfg.accumulate;
    std::printf("training on %lld windows with %d workers, global batch %lld, lr %.2e after %lld warm-up steps, %s decay, "
                "%lld steps per epoch\n",
                static_cast<long long>(n_train), workers, static_cast<long long>(sched.global_batch), sched.peak(),
                static_cast<long long>(cfg.warmup_steps), cfg.decay.c_str(), static_cast<long long>(spe));
    std::fflush(stdout);

    // 4. Epochs, in chunks of steps. A lost trainer (crash, kill, dead node) fails the chunk on
    // every rank; the group is started again from the newest complete checkpoint.
    std::ofstream metrics(out + "/metrics.jsonl"), step_log(out + "/steps.jsonl");
    yard::railway::TrainMetrics prom(run);
    yard::railway::PlotSeries train_loss{"train loss", {}, {}}, val_loss{"validation loss", {}, {}}, f1{"validation macro F1", {}, {}};
    auto t_start = std::chrono::steady_clock::now();
    auto last_print = t_start;
    const int64_t chunk = 20, total = static_cast<int64_t>(epochs) * spe;
    int64_t done_steps = 0, since_ckpt = 0;  // steps trained in this run (for the ETA)
    double epoch_loss = 0, epoch_seconds = 0;
    double epoch_ckpt_ms = 0;  // the longest checkpoint hand-over on the training thread this epoch
    int64_t epoch_samples = 0, epoch_steps = 0;
    int restarts = 0;
    while (epoch < static_cast<uint64_t>(epochs)) {
      int64_t n = std::min<int64_t>(chunk, spe - static_cast<int64_t>(step));
      bool at_epoch_end = static_cast<int64_t>(step) + n >= spe;
      bool save = at_epoch_end || since_ckpt + n >= checkpoint_every;
      std::vector<yard::ObjectRef<ChunkStats>> parts;
      for (auto& t : trainers) parts.push_back(t.call(&RailwayTrainer::train_steps).remote(n, save));
      std::vector<std::shared_ptr<ChunkStats>> got;
      try {
        got = yard::get(parts, 3600s);
      } catch (const yard::Error& err) {
        if (++restarts > 3) throw;
        std::printf("epoch %llu: a trainer was lost (%s); restarting the group from the latest checkpoint\n",
                    static_cast<unsigned long long>(epoch + 1), err.what());
        std::fflush(stdout);
        for (;;) {
          try {
            start_group(true);
            break;
          } catch (const yard::Error& again) {
            // E.g. a lost node's bundle is not placed elsewhere yet.
            if (++restarts > 5) throw;
            std::printf("restarting the group failed (%s); trying again\n", again.what());
            std::fflush(stdout);
          }
        }
        for (auto& why : *ckpt.call(&Checkpointer::skipped).remote().get(60s))
          std::printf("warning: skipped checkpoint %s\n", why.c_str());
        std::printf("resumed at epoch %llu, step %llu\n", static_cast<unsigned long long>(epoch + 1),
                    static_cast<unsigned long long>(step));
        epoch_loss = 0, epoch_samples = 0, epoch_seconds = 0, epoch_steps = 0, epoch_ckpt_ms = 0;
        since_ckpt = 0;
        continue;
      }
      since_ckpt = save ? 0 : since_ckpt + n;
      // Per step: the global mean loss (every rank's loss sums over its samples, added up).
      const auto& r0 = *got[0];
      double seconds = 0;
      for (auto& g : got) seconds = std::max(seconds, g->seconds);
      int64_t chunk_samples = 0;
      double chunk_loss = 0;
      for (size_t i = 0; i < r0.loss_sum.size(); ++i) {
        double ls = 0;
        int64_t ns = 0;
        for (auto& g : got) ls += g->loss_sum[i], ns += g->samples[i];
        epoch_loss += ls;
        epoch_samples += ns;
        chunk_samples += ns;
        chunk_loss += ls;
        int64_t gs = r0.global_step - static_cast<int64_t>(r0.loss_sum.size()) + static_cast<int64_t>(i) + 1;
        step_log << "{\"step\":" << gs << ",\"epoch\":" << epoch + 1 << ",\"loss\":" << ls / std::max<int64_t>(1, ns)
                 << ",\"samples\":" << ns << "}\n";
      }
      step_log.flush();
      epoch_seconds += seconds;
      epoch_steps += static_cast<int64_t>(r0.loss_sum.size());
      epoch_ckpt_ms = std::max(epoch_ckpt_ms, r0.checkpoint_ms);
      done_steps += static_cast<int64_t>(r0.loss_sum.size());
      epoch = r0.epoch;
      step = r0.step;
      prom.chunk(r0.loss_sum.empty() ? 0 : chunk_loss / std::max<int64_t>(1, chunk_samples), seconds,
                 static_cast<long>(r0.loss_sum.size()), chunk_samples / std::max(1e-9, seconds), r0.checkpoint_ms);
      auto now = std::chrono::steady_clock::now();
      double elapsed = std::chrono::duration<double>(now - t_start).count();
      double eta = elapsed / static_cast<double>(std::max<int64_t>(1, done_steps)) *
                   static_cast<double>(std::max<int64_t>(0, total - r0.global_step));
      if (!at_epoch_end && now - last_print >= 5s) {
        last_print = now;
        std::printf("epoch %llu/%d  step %llu/%lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %.0f s\n",
                    static_cast<unsigned long long>(epoch + 1), epochs, static_cast<unsigned long long>(step),
                    static_cast<long long>(spe), epoch_loss / std::max<int64_t>(1, epoch_samples), r0.lr,
                    chunk_samples / std::max(1e-9, seconds), eta);
        std::fflush(stdout);
      }
      if (!at_epoch_end) continue;
      auto ev = *trainers[0].call(&RailwayTrainer::evaluate).remote().get(600s);
      double loss = epoch_loss / std::max<int64_t>(1, epoch_samples);
      double sps = epoch_samples / std::max(1e-9, epoch_seconds);
      prom.epoch(ev.loss, ev.macro_f1, static_cast<long>(epoch));
      std::printf("epoch %llu/%d  steps %lld  loss %.4f  val loss %.4f  val F1 %.3f  acc %.3f  %.0f samples/s  ETA %.0f s\n",
                  static_cast<unsigned long long>(epoch), epochs, static_cast<long long>(spe), loss, ev.loss, ev.macro_f1,
                  ev.accuracy, sps, eta);
      std::fflush(stdout);
      metrics << "{\"epoch\":" << epoch << ",\"steps\":" << spe << ",\"train_loss\":" << loss << ",\"val_loss\":" << ev.loss
              << ",\"val_macro_f1\":" << ev.macro_f1 << ",\"val_accuracy\":" << ev.accuracy
              << ",\"val_amplitude_rmse_mm\":" << ev.amplitude_rmse << ",\"samples_per_s\":" << sps << ",\"workers\":" << workers
              << ",\"restarts\":" << restarts << ",\"step_ms\":" << 1e3 * epoch_seconds / std::max<int64_t>(1, epoch_steps)
              << ",\"checkpoint_stall_ms\":" << epoch_ckpt_ms << "}\n";
      metrics.flush();
      train_loss.x.push_back(static_cast<double>(epoch)), train_loss.y.push_back(loss);
      val_loss.x.push_back(static_cast<double>(epoch)), val_loss.y.push_back(ev.loss);
      f1.x.push_back(static_cast<double>(epoch)), f1.y.push_back(ev.macro_f1);
      epoch_loss = 0, epoch_samples = 0, epoch_seconds = 0, epoch_steps = 0, epoch_ckpt_ms = 0;
    }
    for (auto& t : trainers) t.call(&RailwayTrainer::finish).remote().get(600s);
    pg.remove();
    yard::kill(ckpt);
    yard::railway::write_svg_plot(out + "/curves.svg", "Railway model training", "epoch", "loss / F1", {train_loss, val_loss, f1});
    std::printf("metrics: %s/metrics.jsonl and steps.jsonl, curves: %s/curves.svg, checkpoints: %s\n", out.c_str(), out.c_str(),
                ckpt_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "railway-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
