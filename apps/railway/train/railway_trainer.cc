#include "railway_trainer.h"

#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "yard/actors/ddp.h"
#include "yard/actors/sampler.h"
#include "yard/actors/schedule.h"
#include "yard/actors/shares.h"
#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"
#include "yard/collective.h"
#include "feeds.h"
#include "steppers.h"
#include "yard/railway/model.h"
#include "yard/railway/model_spec.h"
#include "yard/railway/shards.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using yard::actors::Checkpointer;

namespace railway_train {

namespace {

struct Split {
  torch::Tensor x, label, amp, tokens;
};

// The windows of one shard directory: the files its manifest lists, each verified.
std::vector<yard::railway::Window> read_shard_dir(const std::string& dir) {
  std::ifstream in(dir + "/manifest.json");
  if (!in) throw std::runtime_error(dir + ": no manifest.json (the shards were not made, or not completely)");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(dir + "/manifest.json: not valid JSON (" + std::string(e.what()) + ")");
  }
  std::vector<yard::railway::Window> ws;
  for (const auto& f : m.at("shards")) {
    auto part = yard::railway::read_shard(dir + "/" + f.get<std::string>());
    ws.insert(ws.end(), part.begin(), part.end());
  }
  return ws;
}

// Per defect class: (recall, precision) as the threshold on the class's score falls through every
// held-out window's score (at most 100 points).
std::vector<std::vector<double>> pr_curves(const torch::Tensor& prob, const torch::Tensor& label) {
  std::vector<std::vector<double>> curves;
  for (int64_t c = 1; c < 5; ++c) {
    auto score = prob.select(1, c).contiguous();
    auto is = label.eq(c).contiguous();
    auto order = score.argsort(0, true);
    int64_t n = score.numel(), positives = is.sum().item<int64_t>(), tp = 0;
    std::vector<double> curve;
    int64_t every = std::max<int64_t>(1, n / 100);
    for (int64_t k = 0; k < n && positives > 0; ++k) {
      tp += is.data_ptr<bool>()[order.data_ptr<int64_t>()[k]];
      if ((k + 1) % every == 0 || k + 1 == n) curve.push_back(double(tp) / double(positives)), curve.push_back(double(tp) / double(k + 1));
    }
    curves.push_back(std::move(curve));
  }
  return curves;
}

Split pack(const std::vector<const yard::railway::Window*>& v) {
  Split s;
  int64_t n = static_cast<int64_t>(v.size()), T = static_cast<int64_t>(v[0]->x.size() / yard::railway::kFeatures);
  s.x = torch::empty({n, T, yard::railway::kFeatures});
  s.label = torch::empty({n}, torch::kLong);
  s.amp = torch::empty({n});
  s.tokens = torch::empty({n, T}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(s.x[i].data_ptr<float>(), v[i]->x.data(), v[i]->x.size() * sizeof(float));
    auto* tl = s.tokens[i].data_ptr<int64_t>();
    for (int64_t j = 0; j < T; ++j) tl[j] = v[i]->token_label[static_cast<size_t>(j)];
    s.label[i] = static_cast<int64_t>(v[i]->label);
    s.amp[i] = v[i]->amplitude_mm;
  }
  return s;
}

// Loads the shard directories; windows in the last `holdout` of each line's chainage go to val.
// Features are normalised with the training statistics (mean and sd per feature, returned).
std::pair<Split, Split> load_data(const std::vector<std::string>& dirs, double holdout, torch::Tensor& mu,
                                  torch::Tensor& sd) {
  if (dirs.empty()) throw std::runtime_error("no shard directories to train on");
  std::vector<std::vector<yard::railway::Window>> per_dir;
  for (const auto& d : dirs) per_dir.push_back(read_shard_dir(d));
  std::vector<const yard::railway::Window*> tr, va;
  for (auto& ws : per_dir) {
    double end = 0;
    for (auto& w : ws) end = std::max(end, w.start_chainage);
    for (auto& w : ws) (w.start_chainage < (1 - holdout) * end ? tr : va).push_back(&w);
  }
  if (tr.empty() || va.empty()) throw std::runtime_error("the shards hold too few windows for a training and a validation part");
  auto train = pack(tr), val = pack(va);
  mu = train.x.mean(std::vector<int64_t>{0, 1}, true);
  sd = train.x.std(std::vector<int64_t>{0, 1}, true, true) + 1e-6;
  train.x = (train.x - mu) / sd;
  val.x = (val.x - mu) / sd;
  return {train, val};
}

// A checkpoint handed to the checkpointer; handed again (up to 3 times) when the checkpointer's
// process dies while it writes (it is restarted: max_restarts).
struct Handover {
  std::string path;
  std::string note;  // what had to be redone, for the driver's report
};

Handover save_with_retries(yard::ActorHandle<Checkpointer> ckpt, const yard::actors::CheckpointData& c) {
  auto t0 = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    try {
      Handover h{*ckpt.call(&Checkpointer::save).remote(c).get(600s), {}};
      if (attempt > 0) {
        char b[160];
        std::snprintf(b, sizeof b, "checkpoint of step %llu handed again %d time(s) to the restarted checkpointer, written %.1f s after the first try",
                      static_cast<unsigned long long>(c.step), attempt,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        h.note = b;
      }
      return h;
    } catch (const yard::ActorDied& e) {
      if (dynamic_cast<const yard::ActorRestarting*>(&e) == nullptr || attempt >= 3) throw;
    }
  }
}

// The checkpoint to every replica at once (each retried on its own).
std::vector<Handover> save_everywhere(const std::vector<yard::ActorHandle<Checkpointer>>& cks,
                                      const yard::actors::CheckpointData& c) {
  std::vector<std::future<Handover>> each;
  for (auto& ck : cks) each.push_back(std::async(std::launch::async, [&ck, &c] { return save_with_retries(ck, c); }));
  std::vector<Handover> out;
  for (auto& f : each) out.push_back(f.get());
  return out;
}

}  // namespace

struct RailwayTrainer::Impl {
  TrainConfig cfg;
  int rank = 0, world = 1;
  Split train, val;
  std::string spec;      // the model_spec blob of every checkpoint
  RailwayNet net{nullptr};
  std::unique_ptr<yard::collective::Communicator> comm;
  std::unique_ptr<Stepper> stepper;
  double slow_by = 0;  // RAILWAY_TRAIN_SLOW_RANK="R:F": rank R takes 1 + F times as long per step (benchmarks)
  std::unique_ptr<Feed> feed;
  ElasticFeed* elastic = nullptr;  // the feed, in an elastic group
  std::optional<yard::actors::ShareBalancer> shares;  // elastic, --batch-shares speed: each rank's part of a step
  bool has_state = false;          // elastic: this replica trained in a generation (or restored)
  ChunkStats carry;                // elastic: the steps of a chunk a lost peer cut short, reported with the next
  std::vector<yard::ActorHandle<Checkpointer>> ckpts;
  std::future<std::vector<Handover>> pending;  // the last checkpoint's hand-over, per replica
  torch::Tensor class_w;

  int64_t steps_per_epoch() const {
    return (static_cast<int64_t>(feed->steps_per_epoch()) + cfg.accumulate - 1) / cfg.accumulate;
  }
  int64_t steps_left() const {  // in the epoch, at the group's size now
    return (static_cast<int64_t>(feed->steps_left()) + cfg.accumulate - 1) / cfg.accumulate;
  }
  // The data, the model and what goes with them (both kinds of group).
  void build(const TrainConfig& c);
  // The model under the job's seed, with encoder layers [first, end) of `layers` kept.
  RailwayNet make_model(int64_t layers, int first, int end) const {
    torch::manual_seed(cfg.seed);
    return RailwayNet(yard::railway::kFeatures, train.x.size(1), cfg.d_model, layers, cfg.heads, first, end);
  }
  ModelMaker maker() const {
    return [this](int64_t layers, int first, int end) { return make_model(layers, first, end); };
  }
  void make_feed();
  void slow_down_if_asked();  // RAILWAY_TRAIN_SLOW_RANK, for this rank
  SetupInfo info() const;
  Batch fetch(const std::vector<uint64_t>& idx) const;
  // The newest complete checkpoint any checkpointer replica holds, and which replica (-1: none).
  std::pair<std::optional<yard::actors::CheckpointData>, int> newest_checkpoint();
  void hand_over_checkpoint(ChunkStats& st);
  int64_t global_step() const {
    int64_t g = feed->global_step();
    return g >= 0 ? g : stepper->global_step();
  }
};

Batch RailwayTrainer::Impl::fetch(const std::vector<uint64_t>& idx) const {
  Batch b;
  if (idx.empty()) return b;
  auto ix = torch::tensor(std::vector<int64_t>(idx.begin(), idx.end()), torch::kLong);
  b.x = train.x.index_select(0, ix);
  b.label = train.label.index_select(0, ix);
  b.amp = train.amp.index_select(0, ix);
  b.tokens = train.tokens.index_select(0, ix);
  return b;
}

void RailwayTrainer::Impl::make_feed() {
  // Data parallel over the replicas: a pipeline's stages all walk their replica's batches. An
  // elastic group's ranks share the epoch's positions at whatever size the group has.
  auto at = layout_of(cfg, rank, world);
  bool is_elastic = cfg.min_workers > 0, on_request = !cfg.batch_queue.empty();
  bool whole = is_elastic || on_request;  // the ranks share the epoch's one order
  yard::actors::DistributedSampler sampler(train.x.size(0), whole ? 1 : at.replicas, whole ? 0 : at.replica, cfg.seed);
  if (cfg.balance > 0) {
    auto l = train.label.contiguous();
    sampler.set_class_balanced(std::vector<int>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel()), cfg.balance);
  }
  auto fetch_fn = [this](const std::vector<uint64_t>& idx) { return fetch(idx); };
  if (on_request) {
    feed = shared_feed(sampler, static_cast<uint64_t>(cfg.batch), fetch_fn, cfg.batch_queue, rank, world, cfg.join);
  } else if (is_elastic) {
    auto f = std::make_unique<ElasticFeed>(sampler, static_cast<uint64_t>(cfg.batch), fetch_fn);
    elastic = f.get();
    feed = std::move(f);
  } else {
    feed = fixed_feed(sampler, static_cast<uint64_t>(cfg.batch), fetch_fn, static_cast<size_t>(std::max<int64_t>(1, cfg.prefetch)));
  }
}

// Every rank reads the same newest complete checkpoint (the one of the highest step any replica
// holds complete: a replica that lost its disk, or is gone, is passed over): identical replicas,
// optimizers, schedules and data-loader positions. Returns the replica it came from (-1: none).
std::pair<std::optional<yard::actors::CheckpointData>, int> RailwayTrainer::Impl::newest_checkpoint() {
  std::vector<yard::ObjectRef<std::optional<yard::actors::CheckpointData>>> asked;
  for (auto& c : ckpts) asked.push_back(c.call(&Checkpointer::restore).remote());
  std::optional<yard::actors::CheckpointData> best;
  int from = -1;
  for (size_t i = 0; i < asked.size(); ++i) {
    try {
      auto c = *asked[i].get(600s);
      if (c && (!best || c->step > best->step)) best = std::move(c), from = static_cast<int>(i);
    } catch (const yard::ActorDied&) {
      // that replica is gone for good; the others may have the checkpoint
    }
  }
  return {std::move(best), from};
}

RailwayTrainer::RailwayTrainer() : impl_(std::make_unique<Impl>()) {}
RailwayTrainer::~RailwayTrainer() = default;

void RailwayTrainer::Impl::build(const TrainConfig& c) {
  torch::set_num_threads(1);
  yard::actors::keep_freed_memory();
  cfg = c;
  if (cfg.accumulate < 1) throw std::invalid_argument("accumulate must be at least 1");
  torch::Tensor mu, sd;
  std::tie(train, val) = load_data(cfg.shards, cfg.holdout, mu, sd);
  // A pipeline stage builds only its part, once the split is known (the stepper does).
  if (cfg.strategy != "pipeline") net = make_model(cfg.layers, 0, static_cast<int>(cfg.layers));
  if (net && static_cast<int64_t>(net->parameters().size()) != yard::railway::railway_parameter_tensors(cfg.layers))
    throw std::logic_error("the railway model has " + std::to_string(net->parameters().size()) +
                           " parameter tensors, railway_parameter_tensors() says " +
                           std::to_string(yard::railway::railway_parameter_tensors(cfg.layers)));
  yard::railway::ModelSpec m;
  m.tokens = train.x.size(1);
  m.d_model = cfg.d_model, m.layers = cfg.layers, m.heads = cfg.heads;
  m.feature_names = yard::railway::feature_names();
  auto mean = mu.reshape({-1}).contiguous(), spread = sd.reshape({-1}).contiguous();
  m.mean.assign(mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
  m.sd.assign(spread.data_ptr<float>(), spread.data_ptr<float>() + spread.numel());
  m.aligned = cfg.aligned;
  spec = m.to_json();
  // Without balanced epochs, class weights against the imbalance: inverse square root of frequency.
  auto counts = torch::bincount(train.label, {}, 5).to(torch::kFloat) + 1;
  class_w = cfg.balance > 0 ? torch::ones({5}) : (counts.sum() / counts).sqrt();
  class_w = class_w / class_w.mean();
}

void RailwayTrainer::Impl::slow_down_if_asked() {
  slow_by = 0;
  if (const char* slow = std::getenv("RAILWAY_TRAIN_SLOW_RANK"); slow && *slow) {
    int r = -1;
    double f = 0;
    if (std::sscanf(slow, "%d:%lf", &r, &f) != 2 || f < 0)
      throw std::invalid_argument(std::string("RAILWAY_TRAIN_SLOW_RANK='") + slow + "' is not RANK:FRACTION");
    if (r == rank) slow_by = f;
  }
}

SetupInfo RailwayTrainer::Impl::info() const {
  SetupInfo i;
  i.windows = train.x.size(0);
  i.steps_per_epoch = steps_per_epoch();
  i.epoch = feed->epoch();
  i.step = feed->step() / static_cast<uint64_t>(cfg.accumulate);
  i.global_step = global_step();
  i.steps_left = steps_left();
  i.pid = getpid();
  i.node = yard::node_id();
  return i;
}

SetupInfo RailwayTrainer::setup(TrainConfig cfg, int rank, int world, std::string generation,
                                std::vector<yard::ActorHandle<Checkpointer>> ckpts) {
  auto& s = *impl_;
  if (cfg.min_workers > 0) throw std::invalid_argument("an elastic group's trainers are set up with prepare() and regroup()");
  s.rank = rank;
  s.world = world;
  s.ckpts = std::move(ckpts);
  s.build(cfg);
  // Parameter servers need no group among the replicas: they meet at the servers; pipeline stages
  // make their own groups.
  if (cfg.strategy == "ddp" || cfg.strategy == "local-sgd")
    s.comm = yard::collective::create_group(yard::collective::cluster_group("railway-train", world, rank, generation));
  s.make_feed();
  // Every rank reads the same newest complete checkpoint: identical replicas, optimizers,
  // schedules and data-loader positions (and a pipeline's split, which its stages' parts follow).
  std::optional<yard::actors::CheckpointData> from;
  int restored_from = -1;
  if (cfg.resume) std::tie(from, restored_from) = s.newest_checkpoint();
  if (from) cfg.stage_split = pipeline_split_of(*from);
  s.stepper = make_stepper(cfg, rank, world, generation, s.steps_per_epoch(), s.net, s.maker(), s.comm.get(), s.ckpts);
  if (auto own = s.stepper->own_model()) s.net = own;
  s.slow_down_if_asked();
  if (from) {
    yard::actors::load_state(*s.net, from->blobs.at("model"));
    s.feed->restore(from->blobs.at(s.feed->checkpoint_key()));
  }
  s.stepper->begin(from);
  // A fixed share's replacement goes on with its data where the servers have its predecessor.
  if (cfg.join && cfg.batch_queue.empty()) {
    auto g = static_cast<uint64_t>(s.stepper->global_step()), spe = static_cast<uint64_t>(s.steps_per_epoch());
    s.feed->seek(g / spe, g % spe * static_cast<uint64_t>(cfg.accumulate));
  }
  auto info = s.info();
  info.restored_from = restored_from;
  info.ps_pids = s.stepper->helper_pids();
  info.stage_layers = s.stepper->stage_layers();
  for (auto& p : s.net->parameters()) info.parameters += p.numel();
  return info;
}

std::string RailwayTrainer::prepare(TrainConfig cfg, std::vector<yard::ActorHandle<Checkpointer>> ckpts) {
  auto& s = *impl_;
  if (cfg.min_workers < 1) throw std::invalid_argument("prepare() is for an elastic group's trainers (min_workers >= 1)");
  if (cfg.accumulate != 1)
    throw std::invalid_argument("an elastic group trains without gradient accumulation (--accumulate 1)");
  s.ckpts = std::move(ckpts);
  s.build(cfg);
  s.make_feed();
  // Alone until the first regroup; the schedule is the one of the group's first size.
  auto min = static_cast<int>(cfg.min_workers);
  s.elastic->set_world(min, 0);
  s.stepper = make_stepper(cfg, 0, min, "", s.steps_per_epoch(), s.net, s.maker(), nullptr, s.ckpts);
  // A forward and backward pass now, so that the first step in the group does not pay for this
  // process's first allocations and kernel set-up while the others wait (the state is untouched:
  // the gradients are dropped, no optimizer step is taken).
  {
    auto b = s.fetch(s.elastic->warm_up_indices());
    railway_loss(s.net->forward(b.x), b.label, b.tokens, b.amp, s.class_w).backward();
    for (auto& p : s.net->parameters()) p.mutable_grad().reset();
  }
  return yard::node_id();
}

yard::actors::ElasticJoined RailwayTrainer::regroup(yard::actors::ElasticForm f) {
  auto& s = *impl_;
  if (!s.elastic) throw std::logic_error("regroup() before prepare()");
  auto spec = yard::collective::cluster_group("railway-train-" + f.group, f.world, f.rank, f.generation);
  spec.timeout = std::chrono::milliseconds(f.timeout_ms);
  auto comm = yard::collective::create_group(spec);
  yard::actors::Regroup r;
  r.has_state = s.has_state;
  r.global_batch = s.cfg.batch * f.world;
  r.resize_warmup = s.cfg.resize_warmup;
  r.extra = s.feed->state();
  auto per_step = static_cast<uint64_t>(s.cfg.batch * f.world);
  r.total_steps = [&s, per_step](int64_t step, const std::string& pos) {
    return step + static_cast<int64_t>((s.elastic->samples_left(pos, static_cast<uint64_t>(s.cfg.epochs)) + per_step - 1) / per_step);
  };
  r.restore = [&s]() -> std::optional<std::pair<int64_t, std::string>> {
    auto [from, replica] = s.newest_checkpoint();
    if (!from) return std::nullopt;
    auto pos = from->blobs.find("elastic_position");
    if (pos == from->blobs.end())
      throw std::invalid_argument("the checkpoint of step " + std::to_string(from->step) +
                                  " was made by a fixed group: an elastic run cannot continue from it");
    yard::actors::load_state(*s.net, from->blobs.at("model"));
    s.stepper->begin(from);
    return std::make_pair(static_cast<int64_t>(from->step), pos->second);
  };
  auto g = s.stepper->regroup(*comm, r);
  s.feed->restore(r.extra);
  s.elastic->set_world(f.world, f.rank);
  s.shares.reset();
  if (s.cfg.batch_shares == "speed" && f.world > 1) s.shares.emplace(static_cast<uint64_t>(s.cfg.batch * f.world), f.world);
  s.rank = f.rank;
  s.world = f.world;
  s.slow_down_if_asked();
  s.comm = std::move(comm);  // the previous generation's group is left (its peers may be gone)
  s.has_state = true;
  yard::actors::ElasticJoined j;
  j.source = g.source;
  j.step = g.step;
  j.loaded = g.loaded;
  j.from_disk = g.from_disk;
  j.bytes = static_cast<int64_t>(g.bytes);
  return j;
}

void RailwayTrainer::Impl::hand_over_checkpoint(ChunkStats& st) {
  auto c0 = std::chrono::steady_clock::now();
  // The previous write has long finished; a failure surfaces here rather than being lost.
  if (pending.valid())
    for (auto& h : pending.get())
      if (!h.note.empty()) st.notes.push_back(h.note);
  // On this thread only copies of the tensors; serialising them and the call that hands the bytes
  // to the checkpointer run beside training.
  yard::actors::CheckpointData c;
  c.step = static_cast<uint64_t>(global_step());
  c.blobs[feed->checkpoint_key()] = feed->state();
  c.blobs["model_spec"] = spec;
  c.blobs["schedule"] = stepper->schedule_note();
  pending = std::async(std::launch::async, [c = std::move(c), cks = ckpts, model = yard::actors::StateSnapshot(*net),
                                            parts = stepper->checkpoint_parts()]() mutable {
    yard::actors::make_background_thread();
    c.blobs["model"] = model.bytes();
    parts(c);
    return save_everywhere(cks, c);
  });
  st.checkpoint_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
}

ChunkStats RailwayTrainer::train_steps(int64_t steps, bool checkpoint) {
  auto& s = *impl_;
  ChunkStats st = std::exchange(s.carry, {});
  auto t0 = std::chrono::steady_clock::now();
  s.net->train();
  uint64_t epoch = s.feed->epoch();
  // Batches on request: as many as the queue hands this rank in the chunk.
  int64_t limit = s.cfg.batch_queue.empty() ? steps : std::numeric_limits<int64_t>::max();
  for (int64_t k = 0; k < limit && s.feed->epoch() == epoch; ++k) {
    // An elastic group's survivors go on from the last step they completed: a step that fails
    // (a peer lost) leaves the data position where it was, as it leaves the model.
    std::string before = s.elastic ? s.feed->state() : std::string();
    s.stepper->begin_busy();
    if (s.shares) s.elastic->set_shares(s.shares->shares());
    // Up to `accumulate` micro-batches of this epoch make one step.
    std::vector<FeedItem> micro;
    do {
      auto item = s.feed->next();
      if (item.none) break;  // batches on request: the chunk is used up
      micro.push_back(std::move(item));
    } while (static_cast<int64_t>(micro.size()) < s.cfg.accumulate && s.feed->epoch() == epoch);
    if (micro.empty()) break;
    std::vector<int64_t> sizes;
    int64_t local = 0;
    for (auto& m : micro) sizes.push_back(static_cast<int64_t>(m.indices.size())), local += sizes.back();
    auto step_start = std::chrono::steady_clock::now();
    StepBatches sb;
    sb.sizes = sizes;
    sb.loss_of = [&](size_t i) {
      const auto& b = micro[i].batch;
      auto loss = railway_loss(s.net->forward(b.x), b.label, b.tokens, b.amp, s.class_w);
      // A slower machine, for benchmarks: this rank's compute takes (1 + slow_by) times as long.
      if (s.slow_by > 0) std::this_thread::sleep_for((std::chrono::steady_clock::now() - step_start) * s.slow_by * 3);
      return loss;
    };
    sb.input_of = [&](size_t i) { return micro[i].batch.x; };
    sb.loss_on = [&](size_t i, int64_t first, int64_t n, const RailwayOut& out) {
      const auto& b = micro[i].batch;
      return railway_loss_share(out, b.label, b.tokens, b.amp, s.class_w, first, n);
    };
    double loss_sum = 0;
    try {
      loss_sum = s.stepper->step(sb);
    } catch (...) {
      if (s.elastic) {
        s.feed->restore(before);
        s.carry = std::move(st);
      }
      throw;
    }
    if (auto busy = s.stepper->last_busy()) {
      st.busy_s.push_back(busy->busy_s), st.wait_s.push_back(busy->wait_s);
      if (s.shares) s.shares->observe(busy->group_rates);
    }
    st.steps.push_back(micro[0].global_step >= 0 ? micro[0].global_step : s.stepper->global_step());
    st.step_end.push_back(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    if (!s.stepper->reports_loss()) local = 0;
    st.lr = s.stepper->last_lr();
    st.lrs.push_back(st.lr);
    auto stale = s.stepper->last_staleness();
    if (stale.ahead >= 0) st.ahead.push_back(stale.ahead), st.stale_updates.push_back(stale.stale_updates);
    st.loss_sum.push_back(loss_sum);
    st.samples.push_back(local);
  }
  s.feed->done();
  if (s.rank == 0) st.helper_restarts = s.stepper->helper_restarts();
  // Local SGD: a checkpoint and the epoch's evaluation see the replicas averaged.
  if (checkpoint || s.feed->epoch() != epoch) s.stepper->synchronize();
  st.epoch = s.feed->epoch();
  st.step = s.feed->step() / static_cast<uint64_t>(s.cfg.accumulate);
  st.global_step = s.global_step();
  st.steps_left = s.steps_left();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (checkpoint && s.rank == 0) s.hand_over_checkpoint(st);
  return st;
}

EvalStats RailwayTrainer::evaluate() {
  auto& s = *impl_;
  torch::NoGradGuard ng;
  s.net->eval();
  EvalStats ev;
  // A pipeline's stages compute the outputs together (every stage of the first replica is asked);
  // stage 0 (rank 0) reports.
  auto shared = s.stepper->outputs(s.val.x);
  if (s.rank != 0) return ev;
  // In batches: the held-out track's windows at once would hold every layer's activations of all
  // of them (gigabytes for a large run) in one process.
  RailwayOut out;
  if (shared) {
    out = std::move(*shared);
  } else {
    std::vector<torch::Tensor> cls, amp;
    constexpr int64_t kBatch = 512;
    int64_t n = s.val.x.size(0);
    for (int64_t i = 0; i == 0 || i < n; i += kBatch) {  // one (empty) pass when there is none
      auto part = s.net->forward(s.val.x.narrow(0, i, std::min(kBatch, n - i)));
      cls.push_back(part.cls);
      amp.push_back(part.amp);
    }
    out.cls = torch::cat(cls);
    out.amp = torch::cat(amp);
  }
  ev.loss = (torch::nn::functional::cross_entropy(out.cls, s.val.label) + torch::mse_loss(out.amp, s.val.amp)).item<double>();
  auto pred = out.cls.argmax(1);
  ev.accuracy = pred.eq(s.val.label).to(torch::kFloat).mean().item<double>();
  ev.amplitude_rmse = (out.amp - s.val.amp).pow(2).mean().sqrt().item<double>();
  auto truth = s.val.label.contiguous();
  auto guess = pred.contiguous();
  ev.confusion.assign(25, 0);
  for (int64_t i = 0; i < truth.numel(); ++i) ++ev.confusion[size_t(truth.data_ptr<int64_t>()[i] * 5 + guess.data_ptr<int64_t>()[i])];
  double f1 = 0;
  int classes = 0;
  for (int c = 0; c < 5; ++c) {
    double tp = double(ev.confusion[size_t(c * 6)]), col = 0, row = 0;
    for (int k = 0; k < 5; ++k) col += double(ev.confusion[size_t(k * 5 + c)]), row += double(ev.confusion[size_t(c * 5 + k)]);
    ev.precision.push_back(col > 0 ? tp / col : NAN);
    ev.recall.push_back(row > 0 ? tp / row : NAN);
    if (row == 0) continue;  // a class absent from the held-out track
    f1 += tp == 0 ? 0 : 2 * tp / (col + row);
    ++classes;
  }
  ev.macro_f1 = classes ? f1 / classes : 0;
  ev.pr_curve = pr_curves(out.cls.softmax(1), s.val.label);
  ev.samples = s.val.x.size(0);
  return ev;
}

std::vector<std::string> RailwayTrainer::finish() {
  auto& s = *impl_;
  std::vector<std::string> notes;
  if (s.pending.valid())
    for (auto& h : s.pending.get())
      if (!h.note.empty()) notes.push_back(h.note);
  s.stepper->finish();
  if (s.comm) s.comm->destroy();
  return notes;
}

int RailwayTrainer::pid() { return getpid(); }

SetupInfo RailwayTrainer::info() { return impl_->info(); }

}  // namespace railway_train

YARD_ACTOR(railway_train::RailwayTrainer, yard::ctor<>, &railway_train::RailwayTrainer::setup,
           &railway_train::RailwayTrainer::train_steps, &railway_train::RailwayTrainer::evaluate,
           &railway_train::RailwayTrainer::finish, &railway_train::RailwayTrainer::pid,
           &railway_train::RailwayTrainer::prepare, &railway_train::RailwayTrainer::regroup,
           &railway_train::RailwayTrainer::info);
