#include "job.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint_replicas.h"
#include "elastic_trainers.h"
#include "run_log.h"
#include "train_metrics.h"
#include "trainer_group.h"
#include "yard/actors/checkpointer.h"
#include "yard/actors/batch_queue.h"
#include "yard/actors/schedule.h"
#include "yard/allotment.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using yard::actors::Checkpointer;

namespace railway_train {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DataSpec, dir, logs, length_km, unaligned)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrainConfig, d_model, layers, heads, batch, base_lr, base_batch,
                                                warmup_steps, decay, min_lr_fraction, optimizer, weight_decay, holdout,
                                                seed, clip, balance, prefetch, accumulate, strategy, sync_every,
                                                ps_servers, ps_mode, ps_restarts, pp, micro_batches, resize_warmup,
                                                batch_shares)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobSpec, data, out, workers, min_workers, trainer_resources, epochs,
                                                placement, checkpoint_every, keep, checkpoint_replicas, max_restarts,
                                                train)

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// The job ran out of restarts (or cannot go on for another reason): what was lost and how to go on.
class GiveUp : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The job queue asked the job to stop and it did, its progress committed in a checkpoint.
class StoppedForQueue : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the steps of the current epoch add up to.
struct EpochSums {
  double loss = 0, seconds = 0, checkpoint_ms = 0;
  int64_t samples = 0, steps = 0;
};

class TrainingJob {
 public:
  TrainingJob(JobSpec spec, std::string run_dir, bool resuming)
      : spec_(std::move(spec)), run_dir_(std::move(run_dir)), resuming_(resuming),
        run_(fs::path(run_dir_).filename().string()), prom_(run_) {}
  void run();

 private:
  void prepare();
  void start_group(bool resume);
  void recover(const MemberLost& lost);
  void train_chunk();
  bool stop_asked();
  void leave_for_queue();
  void evaluate();
  void finish();
  void note_driver_loss();
  void on_resize(const yard::actors::ElasticResize& r);
  void report_resize(const std::vector<ChunkStats>& got);
  void report_helper_restarts(const std::vector<HelperRestart>& restarts);
  RecoveryReport reporter();
  void print_start() const;

  JobSpec spec_;
  std::string run_dir_;
  bool resuming_;
  std::string run_;
  yard::railway::TrainMetrics prom_;
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<CheckpointReplicas> ckpts_;
  std::optional<yard::PlacementGroup> pg_;
  std::unique_ptr<Trainers> group_;
  std::optional<yard::ActorHandle<yard::actors::BatchQueue>> batches_;  // ps async: batches on request
  std::optional<yard::actors::ElasticResize> resized_;  // reported once the next steps show its pause
  double last_step_end_ = 0;                             // unix seconds
  SetupInfo at_;               // where the group stands
  int64_t furthest_ = 0;       // the furthest global step trained in this run
  int64_t since_ckpt_ = 0;     // steps since the last checkpoint
  bool leaving_ = false;       // asked to stop: the next chunk is one step and a checkpoint
  double step_s_ = 0;          // a step's time, smoothed (sizes an elastic group's chunks)
  std::optional<yard::JobAllotment> stop_;  // the queue's request to stop, once seen
  int64_t most_ahead_ = -1, most_stale_ = -1;  // parameter servers: the most staleness seen
  int restarts_ = 0;
  EpochSums sums_;
  Clock::time_point t_start_ = Clock::now(), last_print_ = Clock::now();
  int64_t done_steps_ = 0;     // steps trained by this driver (for the ETA)
};

void TrainingJob::prepare() {
  fs::create_directories(spec_.out);
  log_ = std::make_unique<RunLog>(spec_.out, resuming_);
  spec_.train.shards = make_shards(spec_.data, reporter());
  spec_.train.aligned = !spec_.data.unaligned;
  spec_.train.epochs = spec_.epochs;
  if (!resuming_) {
    fs::create_directories(run_dir_);
    std::ofstream(run_dir_ + "/job.json") << nlohmann::json(spec_).dump(2) << "\n";
  }
  // Asynchronous parameter servers: the trainers claim batches from one queue, so a fast trainer
  // takes more of them instead of waiting for a slow one at every chunk's end.
  if (spec_.train.strategy == "ps" && spec_.train.ps_mode == "async" && spec_.train.accumulate == 1 &&
      spec_.min_workers == 0) {
    spec_.train.batch_queue = "railway-batches-" + yard::job_id() + "-" + run_;
    batches_ = yard::actor<yard::actors::BatchQueue>(static_cast<uint64_t>(spec_.train.batch))
                   .name(spec_.train.batch_queue)
                   .max_concurrency(spec_.workers + 4, yard::Concurrency::kFibers)
                   .max_restarts(-1)
                   .remote();
  }
  // The checkpointers. Each run keeps its own checkpoints: a restart resumes this run, never an
  // older one.
  ckpts_ = std::make_unique<CheckpointReplicas>(run_dir_, run_, spec_.keep, spec_.checkpoint_replicas);
  if (spec_.min_workers > 0) {
    // An elastic group asks for its trainers one by one: it starts with what it gets.
    group_ = std::make_unique<ElasticTrainers>(spec_.min_workers, spec_.workers, spec_.trainer_resources, run_,
                                               ckpts_->handles(),
                                               [this](const yard::actors::ElasticResize& r) { on_resize(r); });
    return;
  }
  // A placement group reserves a CPU per trainer, all or nothing (a lost node's bundles are placed
  // again by the cluster).
  static const std::map<std::string, yard::PlacementStrategy> strategies{
      {"PACK", yard::PlacementStrategy::kPack}, {"SPREAD", yard::PlacementStrategy::kSpread},
      {"STRICT_PACK", yard::PlacementStrategy::kStrictPack}, {"STRICT_SPREAD", yard::PlacementStrategy::kStrictSpread}};
  pg_ = yard::placement_group(std::vector<yard::Bundle>(static_cast<size_t>(spec_.workers), spec_.trainer_resources),
                              strategies.at(spec_.placement), "railway-trainers");
  if (!pg_->wait(600s)) throw yard::Error("the trainers' placement group was not placed within 10 minutes");
  if (batches_) {  // asynchronous: a lost trainer is replaced while the others train on
    group_ = std::make_unique<ReplacingTrainers>(spec_.workers, spec_.trainer_resources, *pg_, ckpts_->handles(),
                                                 *batches_, spec_.max_restarts, reporter());
    return;
  }
  if (spec_.train.strategy == "ps") {  // fixed shares: a lost trainer's replacement redoes its step
    group_ = std::make_unique<RedoingTrainers>(spec_.workers, spec_.trainer_resources, *pg_, ckpts_->handles(),
                                               spec_.max_restarts, reporter());
    return;
  }
  group_ = std::make_unique<TrainerGroup>(spec_.workers, spec_.trainer_resources, *pg_, ckpts_->handles());
}

void TrainingJob::start_group(bool resume) {
  auto cfg = spec_.train;
  cfg.resume = resume;
  int64_t was = at_.global_step;  // where the last group stood
  at_ = group_->start(cfg);
  furthest_ = std::max(furthest_, at_.global_step);
  since_ckpt_ = 0;
  // The epoch's sums go on when nothing is trained again (a restart from a checkpoint at the very
  // step the last group reached, such as one lost in evaluation); otherwise they start over.
  if (at_.global_step != was) sums_ = {};
}

// Restarts the group from the newest complete checkpoint; a restart that fails (another member
// lost, a lost node's bundle not placed again yet) is tried again, within the restart budget.
void TrainingJob::recover(const MemberLost& lost) {
  auto t0 = Clock::now();
  std::string why = lost.who + " was lost in " + phase_name(lost.phase) + " (" + lost.error + ")";
  for (;;) {
    if (++restarts_ > spec_.max_restarts) {
      int64_t step = ckpts_->latest_step();
      throw GiveUp("gave up after " + std::to_string(spec_.max_restarts) + " restarts (--max-restarts): " + why + ". " +
                   (step >= 0 ? "The newest complete checkpoint is step " + std::to_string(step) + " in " + run_dir_
                              : "No checkpoint was completed in " + run_dir_) +
                   "; continue with: railway-train --resume " + run_dir_);
    }
    std::printf("epoch %llu: %s; restarting the group from the latest checkpoint\n",
                static_cast<unsigned long long>(at_.epoch + 1), why.c_str());
    std::fflush(stdout);
    try {
      start_group(true);
      break;
    } catch (const yard::Error& again) {
      why = again.what();
      std::printf("restarting the group failed (%s); trying again\n", again.what());
      std::fflush(stdout);
    }
  }
  for (auto& s : ckpts_->skipped()) std::printf("warning: skipped checkpoint %s\n", s.c_str());
  // Checkpoints were written, yet no replica holds one now: every copy is lost. Starting over
  // silently would hide that; the job stops and says so.
  if (int64_t written = ckpts_->latest_step(); at_.restored_from < 0 && written > 0)
    throw GiveUp(why + "; and every copy of the run's checkpoints is lost (the newest written was step " +
                 std::to_string(written) + ", kept by " + std::to_string(spec_.checkpoint_replicas) +
                 " checkpointer replicas under " + run_dir_ + "): the run cannot continue where it was. Run the job "
                 "again to train from the start (its data is kept), or with more --checkpoint-replicas");
  log_->rewind(at_.global_step);
  Recovery r;
  r.phase = lost.phase;
  r.lost = lost.who;
  r.error = lost.error;
  r.steps_redone = std::max<int64_t>(0, furthest_ - at_.global_step);
  r.redone = "the group restarted from " +
             (at_.global_step > 0 ? "the checkpoint of step " + std::to_string(at_.global_step) : std::string("the start")) +
             ", " + std::to_string(r.steps_redone) + " steps to train again";
  r.seconds = since(t0);
  log_->recovery(r);
  prom_.recovery(phase_name(r.phase));
  std::printf("resumed at epoch %llu, step %llu%s\n", static_cast<unsigned long long>(at_.epoch + 1),
              static_cast<unsigned long long>(at_.step),
              at_.restored_from < 0 ? " (no checkpoint: from the start)"
                                    : (" (the checkpoint of step " + std::to_string(at_.global_step) + ", from checkpointer replica " +
                                       std::to_string(at_.restored_from) + ")").c_str());
  std::fflush(stdout);
}

// A resumed run: its driver was lost (the steps it reported after the checkpoint are trained again).
void TrainingJob::note_driver_loss() {
  Recovery r;
  r.phase = at_.epoch >= static_cast<uint64_t>(spec_.epochs) ? Phase::kFinish : Phase::kTraining;
  r.lost = "the driver";
  r.error = "the run was not finished";
  // Stopped by the job queue (a preemption): not a loss; the steps redone say whether any was lost.
  if (std::ifstream stopped(run_dir_ + "/STOPPED"); stopped) {
    std::getline(stopped, r.error);
    r.lost = "the run stopped by the job queue";
    r.asked = true;
    stopped.close();
    fs::remove(run_dir_ + "/STOPPED");
  }
  r.steps_redone = std::max<int64_t>(0, log_->last_step() - at_.global_step);
  r.redone = "the run continued from " +
             (at_.global_step > 0 ? "the checkpoint of step " + std::to_string(at_.global_step) : std::string("the start")) +
             ", " + std::to_string(r.steps_redone) + " steps to train again";
  log_->rewind(at_.global_step);
  log_->recovery(r);
  prom_.recovery(phase_name(r.phase));
}

RecoveryReport TrainingJob::reporter() {
  return [this](const Recovery& r) {
    log_->recovery(r);
    prom_.recovery(phase_name(r.phase));
  };
}

// An elastic group changed size: said at once, and written to metrics.jsonl once the next steps
// show how long training paused.
void TrainingJob::on_resize(const yard::actors::ElasticResize& r) {
  if (r.from_disk) {
    // No trainer's state survived: the group read the newest checkpoint, and the steps after it
    // are trained again. Checkpoints were written, yet none was read: every copy is lost.
    if (int64_t written = ckpts_->latest_step(); r.step == 0 && written > 0)
      throw GiveUp("every trainer was lost, and every copy of the run's checkpoints with them (the newest written was "
                   "step " + std::to_string(written) + ", under " + run_dir_ + "): the run cannot continue where it "
                   "was. Run the job again to train from the start (its data is kept), or with more --checkpoint-replicas");
    log_->rewind(r.step);
  }
  if (r.old_world == 0) {  // the group formed: not a change of size
    std::printf("elastic group: training with %d trainer%s (%s)\n", r.new_world, r.new_world == 1 ? "" : "s",
                r.from_disk && r.step > 0 ? "the newest checkpoint's state" : "the start");
    std::fflush(stdout);
    return;
  }
  std::printf("elastic group: %d -> %d trainers at step %lld (%s)%s\n", r.old_world, r.new_world,
              static_cast<long long>(r.step), r.why.c_str(),
              r.from_disk ? (r.step > 0 ? "; no trainer's state survived: continued from the newest checkpoint" : "")
                          : "");
  std::fflush(stdout);
  resized_ = r;
}

void TrainingJob::report_resize(const std::vector<ChunkStats>& got) {
  double first = 0, last = 0, lr = 0;
  for (auto& g : got)
    for (size_t i = 0; i < g.step_end.size(); ++i) {
      if (first == 0 || g.step_end[i] < first) first = g.step_end[i], lr = i < g.lrs.size() ? g.lrs[i] : 0;
      last = std::max(last, g.step_end[i]);
    }
  if (resized_ && first > 0) {
    auto& r = *resized_;
    double pause = last_step_end_ > 0 ? first - last_step_end_ : 0;
    log_->resize(r, lr, pause);
    prom_.resize(r.new_world);
    resized_.reset();
  }
  if (last > 0) last_step_end_ = last;
}

// A helper of the strategy (a parameter server) that restarted in place: no step was trained again.
void TrainingJob::report_helper_restarts(const std::vector<HelperRestart>& restarts) {
  for (auto& h : restarts) {
    Recovery r;
    r.phase = Phase::kTraining;
    r.lost = h.what;
    r.error = "its process was lost; restart " + std::to_string(h.restarts) + " in place, now pid " + std::to_string(h.pid);
    r.redone = h.restored;
    r.seconds = h.seconds;
    reporter()(r);
  }
}

void TrainingJob::train_chunk() {
  // An elastic group settles between chunks (it lets replicas go, takes new ones in): its chunks
  // last about half a second, so that a replica the job queue or a drain asks back leaves within
  // about that (from 1 to 10 steps, by the steps' measured time).
  int64_t elastic_chunk = step_s_ > 0 ? std::clamp<int64_t>(static_cast<int64_t>(0.5 / step_s_), 1, 10) : 10;
  const int64_t chunk = leaving_ ? 1 : spec_.min_workers > 0 ? elastic_chunk : 20, spe = at_.steps_per_epoch;
  int64_t n = std::min<int64_t>(chunk, at_.steps_left);
  bool at_epoch_end = n >= at_.steps_left;
  bool save = leaving_ || at_epoch_end || since_ckpt_ + n >= spec_.checkpoint_every;
  if (batches_) batches_->call(&yard::actors::BatchQueue::open).remote(static_cast<uint64_t>(n * group_->world())).get(60s);
  auto got = group_->train(n, save);
  since_ckpt_ = save ? 0 : since_ckpt_ + n;
  const auto& r0 = got[0];
  ckpts_->handed_again(r0.notes, reporter());
  if (save) ckpts_->check(reporter());
  report_helper_restarts(r0.helper_restarts);
  report_resize(got);
  double seconds = 0, chunk_loss = 0;
  for (auto& g : got) seconds = std::max(seconds, g.seconds);
  int64_t chunk_samples = 0;
  auto by_step = steps_by_global(got, log_->last_logged());
  for (auto& [gs, t] : by_step) {
    sums_.loss += t.loss, sums_.samples += t.samples, chunk_samples += t.samples, chunk_loss += t.loss;
    auto line = t;  // by_step sums the loss; the line has its mean
    line.step = gs, line.epoch = at_.epoch + 1, line.loss = t.loss / std::max<int64_t>(1, t.samples);
    log_->step(line);
    most_ahead_ = std::max(most_ahead_, t.ahead), most_stale_ = std::max(most_stale_, t.stale);
  }
  at_epoch_end = r0.epoch != at_.epoch;
  at_.steps_left = r0.steps_left;
  auto steps = static_cast<int64_t>(by_step.size());
  sums_.seconds += seconds, sums_.steps += steps, done_steps_ += steps;
  if (steps > 0) step_s_ = step_s_ > 0 ? 0.7 * step_s_ + 0.3 * seconds / double(steps) : seconds / double(steps);
  sums_.checkpoint_ms = std::max(sums_.checkpoint_ms, r0.checkpoint_ms);
  at_.epoch = r0.epoch, at_.step = r0.step, at_.global_step = r0.global_step;
  furthest_ = std::max(furthest_, r0.global_step);
  prom_.chunk(steps ? chunk_loss / std::max<int64_t>(1, chunk_samples) : 0, seconds, static_cast<long>(steps),
              chunk_samples / std::max(1e-9, seconds), r0.checkpoint_ms);
  if (at_epoch_end || Clock::now() - last_print_ < 5s) return;
  last_print_ = Clock::now();
  int64_t total = spec_.epochs * spe;
  double eta = since(t_start_) / double(std::max<int64_t>(1, done_steps_)) * double(std::max<int64_t>(0, total - at_.global_step));
  std::string stale = most_stale_ < 0 ? std::string()
                                      : "  staleness: " + std::to_string(most_ahead_) + " steps ahead, " +
                                            std::to_string(most_stale_) + " updates missed (most)";
  if (spec_.min_workers > 0) stale += "  " + std::to_string(group_->world()) + " trainers";
  std::printf("epoch %llu/%d  step %llu/%lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %.0f s%s\n",
              static_cast<unsigned long long>(at_.epoch + 1), spec_.epochs, static_cast<unsigned long long>(at_.step),
              static_cast<long long>(spe), sums_.loss / std::max<int64_t>(1, sums_.samples), r0.lr,
              chunk_samples / std::max(1e-9, seconds), eta, stale.c_str());
  std::fflush(stdout);
}

// Whether the job queue asks this job to stop (yard/allotment.h): preempted at its MIN, or at its
// time limit. Read at every chunk; a control store that cannot be read this time is asked again.
bool TrainingJob::stop_asked() {
  try {
    if (auto a = yard::job_allotment(); a && a->stop_asked()) stop_ = a;
  } catch (const yard::Error&) {
  }
  return stop_.has_value();
}

// Commits the steps trained since the last checkpoint (one more step, then a checkpoint every
// trainer hands over), waits until a checkpointer has it, and leaves. A preempted job is queued
// again and resumes from this step, losing none.
void TrainingJob::leave_for_queue() {
  std::printf("the job queue asks this job to stop within %.0f s (%s): committing a checkpoint\n",
              std::max(0.0, stop_->stop_by - unix_now()),
              stop_->requeued_after ? "preempted; it is queued again and resumes from the checkpoint" : "its time limit");
  std::fflush(stdout);
  if (since_ckpt_ > 0) {
    leaving_ = true;
    train_chunk();
  }
  // Until a checkpointer has it, or 2 s before the queue's deadline: the job leaves by itself
  // (resuming from an older checkpoint then) rather than be stopped without a word.
  double left = stop_->stop_by - 2 - unix_now();
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(1000 * std::clamp(left, 1.0, 60.0)));
  int64_t saved = -1;
  while ((saved = ckpts_->latest_step(2s)) < at_.global_step && Clock::now() < deadline) std::this_thread::sleep_for(100ms);
  std::printf("checkpoint of step %lld: %s (the newest a checkpointer holds: step %lld); leaving\n",
              static_cast<long long>(at_.global_step), saved >= at_.global_step ? "committed" : "NOT committed",
              static_cast<long long>(saved));
  std::fflush(stdout);
  std::ofstream(run_dir_ + "/STOPPED") << (stop_->requeued_after ? "preempted by the job queue" : "its time limit") << " at step "
                                       << at_.global_step << "\n";
  group_.reset();
  if (pg_) pg_->remove();
  ckpts_->stop();
  throw StoppedForQueue("stopped for the job queue at global step " + std::to_string(at_.global_step) +
                        (saved >= at_.global_step ? ", checkpoint committed" : ", checkpoint NOT committed (the newest is step " +
                                                                                     std::to_string(saved) + ")"));
}

void TrainingJob::evaluate() {
  std::printf("evaluating epoch %llu in trainer pid %d\n", static_cast<unsigned long long>(at_.epoch),
              group_->evaluator_pid());
  std::fflush(stdout);
  auto ev = group_->evaluate();
  EpochRecord e;
  e.epoch = at_.epoch;
  e.steps = spec_.min_workers > 0 ? sums_.steps : at_.steps_per_epoch;  // an elastic epoch's steps vary
  e.train_loss = sums_.loss / std::max<int64_t>(1, sums_.samples);
  e.val = ev;
  e.samples_per_s = double(sums_.samples) / std::max(1e-9, sums_.seconds);
  e.workers = group_->world();
  e.restarts = restarts_;
  e.step_ms = 1e3 * sums_.seconds / double(std::max<int64_t>(1, sums_.steps));
  e.checkpoint_stall_ms = sums_.checkpoint_ms;
  log_->epoch(e);
  log_->evaluation_images(ev, at_.epoch);
  // A resize's pause counts from here, not across the evaluation.
  if (last_step_end_ > 0) last_step_end_ = unix_now();
  prom_.epoch(ev.loss, ev.macro_f1, static_cast<long>(at_.epoch));
  double eta = since(t_start_) / double(std::max<int64_t>(1, done_steps_)) *
               double(std::max<int64_t>(0, spec_.epochs * at_.steps_per_epoch - at_.global_step));
  std::printf("epoch %llu/%d  steps %lld  loss %.4f  val loss %.4f  val F1 %.3f  acc %.3f  %.0f samples/s  ETA %.0f s\n",
              static_cast<unsigned long long>(at_.epoch), spec_.epochs, static_cast<long long>(at_.steps_per_epoch),
              e.train_loss, ev.loss, ev.macro_f1, ev.accuracy, e.samples_per_s, eta);
  std::fflush(stdout);
  sums_ = {};
}

void TrainingJob::finish() {
  std::printf("finishing: waiting for the last checkpoint, leaving the group\n");
  std::fflush(stdout);
  ckpts_->handed_again(group_->finish(), reporter());
  if (batches_) {
    std::string taken;
    auto by_rank = *batches_->call(&yard::actors::BatchQueue::taken).remote().get(60s);
    for (auto& [rank, n] : by_rank)
      taken += (taken.empty() ? "" : ", ") + std::string("trainer ") + std::to_string(rank) + " " + std::to_string(n);
    std::printf("batches on request, taken: %s\n", taken.c_str());
    yard::kill(*batches_);
  }
}

void TrainingJob::print_start() const {
  yard::actors::LrSchedule sched;
  sched.base_lr = spec_.train.base_lr;
  sched.base_batch = spec_.train.base_batch;
  int workers = group_->world();
  auto layout = layout_of(spec_.train, 0, workers);
  sched.global_batch = spec_.train.batch * layout.replicas * spec_.train.accumulate;
  std::printf("training on %lld windows with %d workers, global batch %lld, lr %.2e after %lld warm-up steps, %s decay, "
              "%lld steps per epoch\n",
              static_cast<long long>(at_.windows), workers, static_cast<long long>(sched.global_batch), sched.peak(),
              static_cast<long long>(spec_.train.warmup_steps), spec_.train.decay.c_str(),
              static_cast<long long>(at_.steps_per_epoch));
  if (spec_.train.strategy == "local-sgd")
    std::printf("local SGD: the replicas step alone and average their weights every %lld steps\n",
                static_cast<long long>(spec_.train.sync_every));
  if (spec_.train.strategy == "pipeline") {
    std::string split;
    for (int n : at_.stage_layers) split += (split.empty() ? "" : " | ") + std::to_string(n);
    std::printf("pipeline: %d replicas of %d stages (encoder layers per stage, from measured layer times: %s), %lld "
                "micro-batches per batch, 1F1B\n",
                layout.replicas, layout.stages, split.c_str(), static_cast<long long>(spec_.train.micro_batches));
  }
  if (spec_.train.strategy == "ps")
    std::printf("parameter servers: %lld servers hold the weights and the optimizer, mode %s%s\n",
                static_cast<long long>(spec_.train.ps_servers), spec_.train.ps_mode.c_str(),
                batches_ ? ", batches on request (a faster trainer takes more)" : "");
  if (at_.global_step > 0)
    std::printf("resumed run %s at epoch %llu, step %llu (global step %lld)\n", run_.c_str(),
                static_cast<unsigned long long>(at_.epoch + 1), static_cast<unsigned long long>(at_.step),
                static_cast<long long>(at_.global_step));
  std::fflush(stdout);
}

void TrainingJob::run() {
  prepare();
  try {
    start_group(resuming_);
  } catch (const MemberLost& lost) {
    recover(lost);
  }
  if (resuming_) note_driver_loss();
  print_start();
  // An epoch's end is evaluated once (a restart may land on an end already reported); the job
  // ends when every epoch is reported and the group has finished.
  for (;;) {
    try {
      if (at_.epoch > log_->epochs_reported()) {
        evaluate();
      } else if (at_.epoch >= static_cast<uint64_t>(spec_.epochs)) {
        finish();
        break;
      } else if (stop_asked()) {
        leave_for_queue();
      } else {
        train_chunk();
      }
    } catch (const MemberLost& lost) {
      recover(lost);
    }
  }
  group_.reset();
  if (pg_) pg_->remove();
  ckpts_->stop();
  std::ofstream(run_dir_ + "/DONE") << "finished\n";
  log_->write_curves();
  std::printf("metrics: %s/metrics.jsonl and steps.jsonl, curves: %s/curves.svg, checkpoints: %s\n", spec_.out.c_str(),
              spec_.out.c_str(), run_dir_.c_str());
}

int run_guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const StoppedForQueue& e) {
    std::printf("railway-train: %s\n", e.what());
    std::fflush(stdout);
    return kExitStopped;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "railway-train: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int run_job(const JobSpec& spec) {
  return run_guarded([&] {
    std::string run = "run-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count() / 1000000);
    // Absolute paths: a resumed run may be started from another directory.
    auto s = spec;
    s.out = fs::absolute(spec.out).lexically_normal().string();
    s.data.dir = fs::absolute(spec.data.dir).lexically_normal().string();
    TrainingJob(s, s.out + "/checkpoints/" + run, false).run();
  });
}

std::string unfinished_run(const std::string& out) {
  std::string newest;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(out + "/checkpoints", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("run-", 0) != 0 || fs::exists(e.path() / "DONE") || !fs::exists(e.path() / "job.json")) continue;
    if (newest.empty() || name > fs::path(newest).filename().string()) newest = e.path().string();
  }
  return newest;
}

int resume_job(const std::string& run_dir) {
  return run_guarded([&] {
    auto dir = fs::absolute(run_dir).lexically_normal().string();
    if (!dir.empty() && dir.back() == '/') dir.pop_back();
    std::ifstream in(dir + "/job.json");
    if (!in) throw std::runtime_error("--resume " + run_dir + ": no job.json there (not a run directory of railway-train)");
    JobSpec spec;
    try {
      spec = nlohmann::json::parse(in).get<JobSpec>();
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(dir + "/job.json: " + e.what());
    }
    if (fs::exists(dir + "/DONE")) {
      std::printf("run %s finished already; its metrics are in %s\n", dir.c_str(), spec.out.c_str());
      return;
    }
    std::printf("resuming the run in %s\n", dir.c_str());
    std::fflush(stdout);
    TrainingJob(spec, dir, true).run();
  });
}

}  // namespace railway_train
