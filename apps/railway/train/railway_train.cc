// railway-train: the railway model trained data-parallel on a Switchyard cluster.
//
//   railway-train [--data DIR] [--workers N] [--epochs E] [--out DIR] ...
//
// The driver makes sure training shards exist (simulating logs and aligning them with one task
// per log when they do not), starts N trainer actors that form a collective group, runs the
// epochs — each trainer on its shard of every epoch, gradients all-reduced in buckets during
// backward — evaluates on a held-out stretch of track after every epoch, writes per-epoch metrics
// (JSON lines) and a loss/F1 curve (SVG), and checkpoints (rank 0, atomically, last 3 kept).
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <CLI/CLI.hpp>

#include "model.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/ddp.h"
#include "yard/actors/sampler.h"
#include "yard/actors/torch_state.h"
#include "yard/collective.h"
#include "yard/railway/plot.h"
#include "yard/railway/shards.h"
#include "yard/railway/sim.h"
#include "yard/yard.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct TrainConfig {
  std::string data;            // directory of shard directories (or one)
  std::string checkpoints;
  int64_t d_model = 64, layers = 2, heads = 4;
  int64_t batch = 32;          // per worker
  double base_lr = 1e-3;       // for base_batch
  int64_t base_batch = 32;
  int64_t warmup_steps = 20;
  double holdout = 0.2;        // the last fraction of every line's chainage is the validation track
  uint64_t seed = 17;
  double clip = 1.0;
  bool balanced = true;        // class-balanced epochs (defect windows are rare)
  bool resume = false;         // start from the newest complete checkpoint, if any
  YARD_FIELDS(data, checkpoints, d_model, layers, heads, batch, base_lr, base_batch, warmup_steps, holdout, seed, clip,
              balanced, resume);
};

struct EpochStats {
  double loss_sum = 0;
  int64_t samples = 0;
  int64_t steps = 0;
  double seconds = 0;
  YARD_FIELDS(loss_sum, samples, steps, seconds);
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

class RailwayTrainer {
 public:
  RailwayTrainer() = default;

  // Loads the data, builds the replica, joins the group, makes the replicas identical.
  int64_t setup(TrainConfig cfg, int rank, int world, std::string generation) {
    torch::set_num_threads(1);
    cfg_ = cfg;
    rank_ = rank;
    world_ = world;
    auto [train, val] = load_data(cfg.data, cfg.holdout);
    train_ = train;
    val_ = val;
    torch::manual_seed(cfg.seed);
    net_ = RailwayNet(yard::railway::kFeatures, train_.x.size(1), cfg.d_model, cfg.layers, cfg.heads);
    comm_ = yard::collective::create_group(yard::collective::cluster_group("railway-train", world, rank, generation));
    ddp_ = std::make_unique<yard::actors::DistributedDataParallel>(net_.ptr(), *comm_);
    ddp_->broadcast_state(0);
    opt_ = std::make_unique<torch::optim::AdamW>(net_->parameters(), torch::optim::AdamWOptions(cfg.base_lr).weight_decay(1e-4));
    sampler_ = std::make_unique<yard::actors::DistributedSampler>(train_.x.size(0), world, rank, cfg.seed);
    if (cfg.balanced) {
      auto l = train_.label.contiguous();
      std::vector<int> labels(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
      sampler_->set_class_balanced(std::move(labels));
    }
    // Without balanced epochs, class weights against the imbalance: inverse square root of frequency.
    auto counts = torch::bincount(train_.label, {}, 5).to(torch::kFloat) + 1;
    class_w_ = cfg.balanced ? torch::ones({5}) : (counts.sum() / counts).sqrt();
    class_w_ = class_w_ / class_w_.mean();
    if (!cfg.checkpoints.empty() && rank == 0) ckpt_ = std::make_unique<yard::actors::CheckpointStore>(cfg.checkpoints, 3);
    if (cfg.resume && !cfg.checkpoints.empty()) {
      // Every rank reads the same newest complete checkpoint: identical replicas and optimizers.
      yard::actors::CheckpointStore store(cfg.checkpoints, 3);
      if (auto c = store.restore()) {
        yard::actors::load_state(*net_, c->blobs.at("model"));
        yard::actors::load_state(*opt_, c->blobs.at("optimizer"));
        global_step_ = static_cast<int64_t>(c->step);
        resume_epoch_ = std::stoll(c->blobs.at("loader"));
        for (auto& why : store.skipped()) std::fprintf(stderr, "skipped checkpoint %s\n", why.c_str());
      }
    }
    return train_.x.size(0);
  }

  // The epoch to continue with (0 unless setup restored a checkpoint).
  int64_t resume_epoch() { return resume_epoch_; }
  int pid() { return getpid(); }
  std::string node() { return yard::node_id(); }

  EpochStats train_epoch(int64_t epoch) {
    EpochStats st;
    auto t0 = std::chrono::steady_clock::now();
    net_->train();
    uint64_t steps = sampler_->steps_per_epoch(static_cast<uint64_t>(cfg_.batch));
    for (uint64_t s = 0; s < steps; ++s) {
      auto idx = sampler_->batch(static_cast<uint64_t>(epoch), s, static_cast<uint64_t>(cfg_.batch));
      ddp_->begin_step(static_cast<int64_t>(idx.size()));
      opt_->zero_grad();
      if (!idx.empty()) {
        auto ix = torch::tensor(std::vector<int64_t>(idx.begin(), idx.end()), torch::kLong);
        auto [logits, amp] = net_->forward(train_.x.index_select(0, ix));
        auto loss = torch::nn::functional::cross_entropy(logits, train_.label.index_select(0, ix),
                                                         torch::nn::functional::CrossEntropyFuncOptions().weight(class_w_)) +
                    torch::mse_loss(amp, train_.amp.index_select(0, ix));
        loss.backward();
        st.loss_sum += loss.item<double>() * static_cast<double>(idx.size());
        st.samples += static_cast<int64_t>(idx.size());
      }
      ddp_->finish_step();
      torch::nn::utils::clip_grad_norm_(net_->parameters(), cfg_.clip);
      // Linear scaling with the global batch, reached by warm-up; never divided by the workers.
      double lr = yard::actors::scaled_lr(cfg_.base_lr, cfg_.base_batch, cfg_.batch * world_, global_step_, cfg_.warmup_steps);
      for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
      opt_->step();
      ++global_step_;
      ++st.steps;
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ckpt_) {
      yard::actors::Checkpoint c;
      c.step = static_cast<uint64_t>(global_step_);
      c.blobs["model"] = yard::actors::state_bytes(*net_);
      c.blobs["optimizer"] = yard::actors::state_bytes(*opt_);
      c.blobs["loader"] = std::to_string(epoch + 1) + " 0";
      ckpt_->write_async(std::move(c));  // written on the store's thread: training goes on
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

  int finish() {
    if (ckpt_) ckpt_->wait();
    comm_->destroy();
    return 0;
  }

 private:
  TrainConfig cfg_;
  int rank_ = 0, world_ = 1;
  Split train_, val_;
  RailwayNet net_{nullptr};
  std::unique_ptr<yard::collective::Communicator> comm_;
  std::unique_ptr<yard::actors::DistributedDataParallel> ddp_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::unique_ptr<yard::actors::DistributedSampler> sampler_;
  std::unique_ptr<yard::actors::CheckpointStore> ckpt_;
  torch::Tensor class_w_;
  int64_t global_step_ = 0;
  int64_t resume_epoch_ = 0;
};
YARD_ACTOR(RailwayTrainer, yard::ctor<>, &RailwayTrainer::setup, &RailwayTrainer::train_epoch, &RailwayTrainer::evaluate,
           &RailwayTrainer::finish, &RailwayTrainer::resume_epoch, &RailwayTrainer::pid,
           &RailwayTrainer::node);

// ---- the aligner, one log per call --------------------------------------------------------------------

// Simulates a log (when `simulate`) and turns it into shards; returns the number of windows.
int64_t align_log(std::string log_dir, std::string shard_dir, uint64_t seed, double length_km, bool simulate,
                  bool aligned) {
  if (simulate) {
    auto cfg = yard::railway::default_config(seed);
    cfg.length_m = length_km * 1000;
    cfg.max_duration_s = 3600;
    yard::railway::simulate(cfg, log_dir);
  }
  yard::railway::ShardOptions o;
  o.aligned = aligned;  // false: the baseline without clock alignment and position correction
  auto ws = yard::railway::build_windows(log_dir, o);
  return static_cast<int64_t>(yard::railway::write_shards(ws, shard_dir, o).windows);
}
YARD_REMOTE(align_log);

// ---- the driver -------------------------------------------------------------------------------------

int main(int argc, char** argv) {
  yard::init(argc, argv);
  CLI::App app{"Train the railway defect model data-parallel on a Switchyard cluster.", "railway-train"};
  TrainConfig cfg;
  std::string data = "railway-data", out = "railway-out";
  int workers = 2, epochs = 6, logs = 2;
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
  app.add_option("--d-model", cfg.d_model, "model width")->default_val(64);
  app.add_option("--layers", cfg.layers, "encoder layers")->default_val(2);
  app.add_option("--seed", cfg.seed, "seed")->default_val(17);
  bool unbalanced = false, unaligned = false;
  app.add_flag("--unaligned", unaligned, "train on shards made without alignment (the baseline the aligner is measured against)");
  app.add_flag("--unbalanced", unbalanced, "plain epochs (every window once) instead of class-balanced ones");
  CLI11_PARSE(app, argc, argv);
  cfg.balanced = !unbalanced;

  try {
    fs::create_directories(out);
    // 1. Shards: one aligner task per log, in parallel.
    std::vector<yard::ObjectRef<int64_t>> aligned;
    for (int i = 0; i < logs; ++i) {
      std::string log = data + "/log-" + std::to_string(i),
                  shards = data + (unaligned ? "/unaligned/shards-" : "/shards-") + std::to_string(i);
      if (fs::exists(shards + "/manifest.json")) continue;
      bool have_log = fs::exists(log + "/truth.csv");
      std::printf("aligning %s%s\n", log.c_str(), have_log ? "" : " (simulating it first)");
      aligned.push_back(yard::task(align_log).remote(fs::absolute(log).string(), fs::absolute(shards).string(),
                                                      uint64_t(100 + i), length_km, !have_log, !unaligned));
    }
    for (auto& a : aligned) std::printf("  %lld windows\n", static_cast<long long>(*a.get()));
    cfg.data = fs::absolute(unaligned ? data + "/unaligned" : data).string();
    // Each run keeps its own checkpoints: a restart resumes this run, never an older one.
    cfg.checkpoints = fs::absolute(out + "/checkpoints/run-" +
                                   std::to_string(std::chrono::system_clock::now().time_since_epoch().count() / 1000000))
                          .string();

    // 2. Trainers: a placement group reserves a CPU per trainer, all or nothing (a lost node's
    // bundles are placed again by the cluster); a group of `workers` replicas runs in it (again,
    // from the newest checkpoint, after a loss).
    static const std::map<std::string, yard::PlacementStrategy> strategies{
        {"PACK", yard::PlacementStrategy::kPack}, {"SPREAD", yard::PlacementStrategy::kSpread},
        {"STRICT_PACK", yard::PlacementStrategy::kStrictPack}, {"STRICT_SPREAD", yard::PlacementStrategy::kStrictSpread}};
    auto pg = yard::placement_group(std::vector<yard::Bundle>(static_cast<size_t>(workers), yard::Bundle{{"CPU", 1}}),
                                    strategies.at(placement), "railway-trainers");
    if (!pg.wait(600s)) throw yard::Error("the trainers' placement group was not placed within 10 minutes");
    std::vector<yard::ActorHandle<RailwayTrainer>> trainers;
    int64_t n_train = 0, start_epoch = 0;
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
      for (int r = 0; r < workers; ++r) ready.push_back(trainers[r].call(&RailwayTrainer::setup).remote(c, r, workers, gen));
      n_train = *ready[0].get(600s);
      for (auto& x : ready) x.get(600s);
      start_epoch = *trainers[0].call(&RailwayTrainer::resume_epoch).remote().get(60s);
      std::string pids;
      std::string nodes;
      for (auto& t : trainers) {
        pids += " " + std::to_string(*t.call(&RailwayTrainer::pid).remote().get(60s));
        nodes += " " + *t.call(&RailwayTrainer::node).remote().get(60s);
      }
      std::printf("trainer pids:%s\ntrainer nodes:%s\n", pids.c_str(), nodes.c_str());
    };
    start_group(false);
    std::printf("training on %lld windows with %d workers, global batch %lld, lr %.2e after %lld warm-up steps\n",
                static_cast<long long>(n_train), workers, static_cast<long long>(cfg.batch * workers),
                yard::actors::scaled_lr(cfg.base_lr, cfg.base_batch, cfg.batch * workers, 1 << 30, cfg.warmup_steps),
                static_cast<long long>(cfg.warmup_steps));

    // 3. Epochs. A lost trainer (crash, kill, dead node) ends the epoch with an error on every
    // rank; the group is started again from the newest complete checkpoint.
    std::ofstream metrics(out + "/metrics.jsonl");
    yard::railway::PlotSeries train_loss{"train loss", {}, {}}, val_loss{"validation loss", {}, {}}, f1{"validation macro F1", {}, {}};
    auto t_start = std::chrono::steady_clock::now();
    int restarts = 0;
    for (int e = static_cast<int>(start_epoch); e < epochs;) {
      std::vector<yard::ObjectRef<EpochStats>> parts;
      for (auto& t : trainers) parts.push_back(t.call(&RailwayTrainer::train_epoch).remote(int64_t(e)));
      EpochStats total;
      try {
        for (auto& p : yard::get(parts, 3600s)) {
          total.loss_sum += p->loss_sum;
          total.samples += p->samples;
          total.steps = std::max(total.steps, p->steps);
          total.seconds = std::max(total.seconds, p->seconds);
        }
      } catch (const yard::Error& err) {
        if (++restarts > 3) throw;
        std::printf("epoch %d: a trainer was lost (%s); restarting the group from the latest checkpoint\n", e + 1,
                    err.what());
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
        e = static_cast<int>(start_epoch);
        std::printf("resumed at epoch %d\n", e + 1);
        continue;
      }
      auto ev = *trainers[0].call(&RailwayTrainer::evaluate).remote().get(600s);
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      double eta = elapsed / (e + 1 - start_epoch) * (epochs - e - 1);
      double loss = total.loss_sum / std::max<int64_t>(1, total.samples);
      std::printf("epoch %d/%d  steps %lld  loss %.4f  val loss %.4f  val F1 %.3f  acc %.3f  %.0f samples/s  ETA %.0f s\n",
                  e + 1, epochs, static_cast<long long>(total.steps), loss, ev.loss, ev.macro_f1, ev.accuracy,
                  total.samples / std::max(1e-9, total.seconds), eta);
      std::fflush(stdout);
      metrics << "{\"epoch\":" << e + 1 << ",\"steps\":" << total.steps << ",\"train_loss\":" << loss
              << ",\"val_loss\":" << ev.loss << ",\"val_macro_f1\":" << ev.macro_f1 << ",\"val_accuracy\":" << ev.accuracy
              << ",\"val_amplitude_rmse_mm\":" << ev.amplitude_rmse << ",\"samples_per_s\":"
              << total.samples / std::max(1e-9, total.seconds) << ",\"workers\":" << workers << ",\"restarts\":" << restarts
              << "}\n";
      metrics.flush();
      train_loss.x.push_back(e + 1), train_loss.y.push_back(loss);
      val_loss.x.push_back(e + 1), val_loss.y.push_back(ev.loss);
      f1.x.push_back(e + 1), f1.y.push_back(ev.macro_f1);
      ++e;
    }
    for (auto& t : trainers) t.call(&RailwayTrainer::finish).remote().get(120s);
    pg.remove();
    yard::railway::write_svg_plot(out + "/curves.svg", "Railway model training", "epoch", "loss / F1", {train_loss, val_loss, f1});
    std::printf("metrics: %s/metrics.jsonl, curves: %s/curves.svg, checkpoints: %s/checkpoints\n", out.c_str(), out.c_str(), out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "railway-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
