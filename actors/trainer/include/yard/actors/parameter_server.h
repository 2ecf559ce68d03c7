// Parameter servers: S server actors each own a shard of a model's parameters and apply the
// optimizer to it; W workers compute gradients on their own data, push them to every server and
// pull fresh weights (TensorFlow's ParameterServerStrategy, Li et al.'s parameter server).
//
// Modes (PsMode):
//  * sync: a server waits for the gradients of all W workers for a step and applies their
//    average over the global batch (each weighted by its batch) as one optimizer step: the same
//    training as DDP on the same global batch.
//  * async: each push is applied at once, as one optimizer step on that worker's batch; a worker
//    never waits. The updates other workers applied between a worker's pull and its push are its
//    staleness, reported per push.
//  * ssp:K (bounded staleness, Ho et al.): pushes are applied at once as in async, but a worker
//    may run at most K steps ahead of the slowest one: its pull waits until the slowest has
//    caught up to within K. ssp:0 is sync.
// Shards hold whole tensors, balanced by size (plan_shards). The optimizer (AdamW or SGD with
// momentum, weight decay, the LrSchedule) runs on the server on its shard as one flat tensor;
// both optimizers are element-wise, so that is the same arithmetic as per parameter. Gradient
// clipping, when asked, is each worker's on its own gradient before the push.
// Only files that train include this header (it pulls in LibTorch).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "yard/actors/checkpointer.h"
#include "yard/actors/schedule.h"
#include "yard/condition.h"
#include "yard/tensor_codec.h"
#include "yard/yard.h"

namespace yard::actors {

// Which tensors (indices into `sizes`, ascending) each of `servers` shards holds: whole tensors,
// the largest first onto the server with the fewest elements so far, so that no server holds more
// than its share plus one tensor. Throws std::invalid_argument when servers < 1 or when a server
// would hold nothing (more servers than tensors, or tensors without elements).
std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& sizes, int servers);

struct PsMode {
  enum class Kind { kSync, kAsync, kBoundedStaleness };
  Kind kind = Kind::kSync;
  int staleness = 0;  // kBoundedStaleness: K >= 1
  // "sync", "async" or "ssp:K" (K >= 0; ssp:0 is sync). Throws std::invalid_argument naming it.
  static PsMode parse(const std::string& text);
  std::string name() const;
};

// A server's configuration, as it travels to the server actor.
struct PsShardConfig {
  std::string optimizer = "adamw";  // or "sgd"
  double weight_decay = 1e-4;
  double momentum = 0.9;            // sgd
  double base_lr = 1e-3;            // the LrSchedule's fields
  int64_t base_batch = 32;
  int64_t global_batch = 32;
  int64_t warmup_steps = 0;
  std::string decay = "constant";
  int64_t total_steps = 0;
  double final_fraction = 0.0;
  std::string mode = "sync";
  int workers = 1;
  int64_t wait_ms = 600000;         // how long a pull waits for the other workers
  // LibTorch's intra-op threads in the server's process: one by default, so that the optimizer's
  // step leaves the cores to the workers (idle OpenMP threads spin and take CPU from them).
  int threads = 1;
  YARD_FIELDS(optimizer, weight_decay, momentum, base_lr, base_batch, global_batch, warmup_steps, decay,
              total_steps, final_fraction, mode, workers, wait_ms, threads);
  LrSchedule schedule() const;
};

// What a server says about one push.
struct PsAck {
  int64_t version = 0;        // updates applied to the shard so far
  int64_t steps = 0;          // the pushing worker's steps so far (this one included)
  int64_t ahead = 0;          // steps the pusher had done beyond the slowest worker when it began this one
  int64_t stale_updates = 0;  // updates applied by others between its pull and this push
  int restarts = 0;           // the server's restarts so far (yard::restart_count())
  YARD_FIELDS(version, steps, ahead, stale_updates, restarts);
};

// Where a server that restarts (ActorCreator::max_restarts) takes its shard back from: the newest
// checkpoint that any of the checkpointers holds with the part `part` (a ParameterShard::save,
// e.g. from ParameterClient::snapshots()). Without checkpointers the server does not restore
// itself, and a restart leaves it empty (its calls fail until it is set up again).
struct PsRecovery {
  PsShardConfig cfg;
  std::vector<ActorHandle<Checkpointer>> from;
  std::string part;
  YARD_FIELDS(cfg, from, part);
};

// What a restarted server restored.
struct PsRestored {
  int restarts = 0;        // 0: the server never restarted
  int64_t step = -1;       // the step of the checkpoint its shard came from
  int64_t version = 0;     // the shard's updates in that checkpoint
  int pid = 0;             // its process now
  double seconds = 0;      // from its start to the shard restored
  YARD_FIELDS(restarts, step, version, pid, seconds);
};

// Where a worker that replaces a lost one stands on a server: the step it goes on with (the first
// the server lacks from that worker; 0 when the server cannot tell: nothing pushed by it since the
// server was set up or restored), and the server's updates so far.
struct PsJoin {
  int64_t next_step = 0;
  int64_t version = 0;
  YARD_FIELDS(next_step, version);
};

// One shard's state and rules, without processes or waiting (the server actor adds those).
class ParameterShard {
 public:
  // initial: the shard's tensors flattened into one (float32 or float64). Throws
  // std::invalid_argument for a bad mode, optimizer or worker count.
  ParameterShard(torch::Tensor initial, const PsShardConfig& cfg);
  // Worker w's gradient for its step `step` (counted from 1; 0: the step being gathered), the
  // mean over its `batch` samples (flat, as initial). Sync gathers by step number, so that pushes
  // made again after a restore (ParameterClient) fall into place: see gather(). A step the shard
  // has from the worker already (pushed again by its replacement) changes nothing.
  PsAck push(int worker, int64_t batch, const torch::Tensor& grad, int64_t step = 0);
  // Where worker w stands, for its replacement (PsJoin).
  PsJoin join(int worker) const;
  // Whether worker w may take the weights for its next step now (sync: its last step's update is
  // applied; ssp:K: it is at most K steps ahead of the slowest).
  bool may_pull(int worker) const;
  // The current weights, noted as what worker w computes its next step on.
  torch::Tensor pull(int worker);
  // The shard's whole state (weights, optimizer state, updates applied) as bytes, and back: a
  // shard loaded from them continues with every worker at the same step, the saved version.
  // load() throws std::runtime_error for bytes that are not a shard of this size.
  std::string save() const;
  void load(const std::string& bytes);
  // A shard made from saved bytes alone (its size is theirs).
  static std::unique_ptr<ParameterShard> from_saved(const std::string& bytes, const PsShardConfig& cfg);
  int64_t version() const { return version_; }
  const PsMode& mode() const { return mode_; }
  const torch::Tensor& weights() const { return weights_; }

 private:
  void check_worker(int worker) const;
  void gather(size_t w, int64_t step, int64_t batch, const torch::Tensor& g);
  void start_gather(int64_t step);  // an empty sum for `step` (0: unknown, the next push says)
  struct Saved;  // a saved state, read: the weights, the optimizer's state, the version
  static Saved read_saved(const std::string& bytes);
  void take(Saved& saved);
  void apply(const torch::Tensor& grad);
  int64_t slowest() const;

  PsMode mode_;
  LrSchedule schedule_;
  torch::Tensor weights_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  int64_t version_ = 0;
  std::vector<int64_t> steps_;  // pushes per worker
  std::vector<int64_t> seen_;   // the version each worker last pulled
  std::vector<int64_t> ahead_;  // steps_[w] - the slowest's, when w last pulled
  torch::Tensor sum_;           // sync: this step's batch-weighted gradient sum
  int64_t sum_batch_ = 0;
  int arrived_ = 0;
  int64_t gathering_ = 0;            // sync: the step being gathered (0: none yet, or just restored)
  std::vector<int64_t> last_push_;   // each worker's last pushed step (0: none since set-up or restore)
};

// The server actor: one shard. Make it with max_concurrency of at least the number of workers
// (the pulls of sync and ssp wait for the other workers' pushes).
//
// A server made with a PsRecovery that names checkpointers restores its shard from the newest
// checkpoint holding it when it restarts, before it takes any call; the workers' clients go on
// against it (the updates since that checkpoint are lost to this shard only). When no checkpoint
// holds the part yet, the restarted server fails to start, and the workers' calls fail with
// yard::ActorDied, as for a server that cannot restart.
class ParameterServer {
 public:
  explicit ParameterServer(PsRecovery recovery = {});
  ~ParameterServer();
  // The shard's initial values and configuration. Returns its number of elements.
  int64_t setup(PsShardConfig cfg, torch::Tensor initial);
  // Set up from a saved state (ParameterShard::save) instead. Returns its number of elements.
  int64_t restore(PsShardConfig cfg, std::string state);
  // The shard's state now, for a checkpoint.
  std::string snapshot();
  // Worker w's gradient for its step `step` (ParameterShard::push).
  PsAck push(int worker, int64_t step, int64_t batch, TensorView grad);
  // Waits (this call only) until worker w may go on, then returns the weights for its next step.
  // Throws yard::TimeoutError when the others do not come within the configured wait. life: the
  // server's restarts when it acknowledged the worker's last push (-1: no push to check); when the
  // server has restarted since, that push was lost with the earlier process, and the pull returns
  // at once with a tensor of no elements: push again.
  torch::Tensor pull(int worker, int life);
  // For a worker that replaces a lost one: where worker w stands (ParameterShard::join), and the
  // weights now, without waiting (a sync pull would wait for the very push the worker is to make).
  PsJoin join(int worker);
  torch::Tensor weights(int worker);
  int64_t version();
  int pid();
  // What this server restored when it restarted (restarts 0 in its first life).
  PsRestored restored();

 private:
  void recover(const PsRecovery& r);

  PsRestored restored_;
  Condition cond_;
  std::unique_ptr<ParameterShard> shard_;
  int64_t wait_ms_ = 600000;
};

// The worker's side: this replica's gradients pushed to every server, its weights pulled from
// every server, all servers at once.
struct PsStepStats {
  int64_t max_ahead = 0;          // steps ahead of the slowest worker, the most any server saw
  int64_t max_stale_updates = 0;  // updates by others between pull and push, the most
  int64_t version = 0;            // the first server's updates so far
};

class ParameterClient {
 public:
  // servers: the shard actors, set up with this model's shards as plan_shards(sizes, S) gives
  // them. worker: this replica's index among the workers. clip: maximum gradient norm (0: none).
  ParameterClient(std::shared_ptr<torch::nn::Module> model, std::vector<ActorHandle<ParameterServer>> servers,
                  int worker, double clip = 0);
  // Sets every server up from this model's current values (one worker does this, before any pull).
  void initialise(const PsShardConfig& cfg);
  // Sets every server up from saved states instead (one per server, as snapshots() gave them).
  void restore(const PsShardConfig& cfg, const std::vector<std::string>& states);
  // Every server's state now (each taken between two of its updates).
  std::vector<std::string> snapshots();
  // The servers' process ids.
  std::vector<int> server_pids();
  // Replaces the model's parameters with the servers' (waits as a pull does).
  void pull();
  // For a worker that replaces a lost one with the same index: the model's parameters from every
  // server without waiting, and the step count where the servers have the lost worker (the first
  // step some server lacks from it, minus one). Returns that count, or -1 when no server can tell
  // (then the count is left as it was).
  int64_t join();
  // The steps done so far, as the next push numbers them (a job continued from a checkpoint
  // numbers on from the checkpoint's step).
  void set_steps(int64_t steps) { steps_ = steps; }
  // One step over micro-batches of sizes[i] samples (loss_of(i) returns micro-batch i's mean
  // loss): gradients pushed, weights for the next step pulled. Returns the sum over micro-batches
  // of mean loss × size.
  double step(const std::vector<int64_t>& sizes, const std::function<torch::Tensor(size_t)>& loss_of);
  const PsStepStats& last() const { return last_; }
  int64_t steps() const { return steps_; }
  // Restarts of servers this client has seen since it last asked (server index, what it restored),
  // each restart once. A call that a server's restart cut off is made again against the restarted
  // server (a push is pushed again: the restored shard has not seen it).
  std::vector<std::pair<size_t, PsRestored>> take_restarts();

 private:
  // Server s's call made by `call`, made again (up to a bound) while the server restarts.
  template <class T, class Call>
  T retried(size_t s, Call&& call);
  template <class T, class Method, class... Args>
  std::vector<T> on_every_server(Method method, const Args&... args);
  PsAck push_to(size_t s, int64_t batch, const torch::Tensor& flat);
  void note_restarts(size_t s, int restarts);
  void copy_in(size_t s, const torch::Tensor& flat);

  std::vector<int> restarts_seen_;
  std::vector<std::pair<size_t, PsRestored>> restarts_;
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<ActorHandle<ParameterServer>> servers_;
  int worker_;
  double clip_;
  PsStepStats last_;
  int64_t steps_ = 0;
  std::shared_ptr<torch::nn::Module> model_;
};

}  // namespace yard::actors
