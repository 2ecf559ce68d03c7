// railway-train: the railway model trained data-parallel on a Switchyard cluster.
//
//   railway-train [--data DIR] [--workers N] [--epochs E] [--out DIR] ...
//   railway-train --resume OUT/checkpoints/run-...
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
// metrics go to steps.jsonl, per-epoch ones and recoveries to metrics.jsonl, curves to
// curves.svg. Any one process lost at any moment is survived (job.h says how).
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "job.h"
#include "yard/actors/pipeline_plan.h"
#include "yard/railway/model_spec.h"
#include "yard/yard.h"

namespace {

// --workers N or MIN:MAX (1 <= MIN <= MAX <= 64): {MIN, MAX} (MIN 0 for a fixed N), or nullopt.
std::optional<std::pair<int, int>> parse_workers(const std::string& v) {
  auto num = [](const std::string& t) {
    return !t.empty() && t.size() < 4 && t.find_first_not_of("0123456789") == std::string::npos ? std::stoi(t) : -1;
  };
  auto colon = v.find(':');
  int hi = num(colon == std::string::npos ? v : v.substr(colon + 1));
  int lo = colon == std::string::npos ? hi : num(v.substr(0, colon));
  if (lo < 1 || hi > 64 || hi < lo) return std::nullopt;
  return std::make_pair(colon == std::string::npos ? 0 : lo, hi);
}

// An embedded cluster (no --address / YARD_ADDRESS) offers a CPU per trainer and two more for the
// checkpointer and aligners, even on a smaller machine: like torchrun, it oversubscribes rather
// than waiting for CPUs that will never come. A real cluster offers what its nodes have.
void init_cluster(int argc, char** argv) {
  yard::InitOptions o;
  int want = 2, dp = 0, pp = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--workers")  // room for MAX
      if (auto w = parse_workers(argv[i + 1])) want = std::max(want, w->second);
    if (a == "--dp") dp = std::atoi(argv[i + 1]);
    if (a == "--pp") pp = std::atoi(argv[i + 1]);
  }
  want = std::max(want, dp * pp);
  o.num_cpus = std::max(static_cast<int>(std::thread::hardware_concurrency()), want + 2);
  yard::init(o, argc, argv);
}

// Where the data and outputs are, and the trainers' group.
void add_job_options(CLI::App& app, railway_train::JobSpec& s) {
  app.add_option("--data", s.data.dir, "data directory: logs and shards (made when missing)")->default_val("railway-data");
  app.add_option("--out", s.out, "metrics, curves and checkpoints")->default_val("railway-out");
  app.add_option_function<std::string>(
         "--workers",
         [&s](const std::string& v) { std::tie(s.min_workers, s.workers) = *parse_workers(v); },
         "trainer actors (data-parallel replicas); MIN:MAX for an elastic group, which starts as soon as MIN are "
         "placed, grows towards MAX when the cluster has room and goes on without lost or drained trainers (default 2)")
      ->check([](const std::string& v) -> std::string {
        return parse_workers(v) ? "" : "wants N or MIN:MAX with 1 <= MIN <= MAX <= 64, not '" + v + "'";
      });
  app.add_option_function<std::string>(
         "--trainer-resources",
         [&s](const std::string& v) {
           s.trainer_resources.clear();
           auto j = nlohmann::json::parse(v);
           for (auto& [k, n] : j.items()) s.trainer_resources[k] = n.get<double>();
         },
         "what each trainer asks of a node, as JSON (default {\"CPU\": 1}); e.g. {\"CPU\": 1, \"trainer\": 1} to "
         "keep trainers on the nodes that offer \"trainer\"")
      ->check([](const std::string& v) -> std::string {
        auto j = nlohmann::json::parse(v, nullptr, false);
        if (j.is_discarded() || !j.is_object() || j.empty())
          return "wants a JSON object of resource amounts, not '" + v + "'";
        for (auto& [k, n] : j.items())
          if (!n.is_number() || n.get<double>() < 0)
            return k + " must be a non-negative number";
        return "";
      });
  app.add_option("--batch-shares", s.train.batch_shares,
                 "an elastic group's part of each step per trainer: speed (by each trainer's measured throughput, so "
                 "that a slower node gets fewer samples and no step waits for it; the global batch stays) or equal")
      ->default_val("speed")
      ->check(CLI::IsMember({"speed", "equal"}));
  app.add_option("--epochs", s.epochs, "epochs")->default_val(6)->check(CLI::Range(1, 1000));
  app.add_option("--placement", s.placement, "how the trainers' placement group lays them out over the nodes")
      ->default_val("PACK")
      ->check(CLI::IsMember({"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}));
  app.add_option("--logs", s.data.logs, "simulated logs (trains) to train on, made when missing")->default_val(2)->check(CLI::Range(1, 1000));
  app.add_option("--length-km", s.data.length_km, "line length of each simulated log")->default_val(25)->check(CLI::PositiveNumber);
}

// The model, its optimizer and its schedule.
void add_model_options(CLI::App& app, railway_train::TrainConfig& c) {
  app.add_option("--batch", c.batch, "batch per worker")->default_val(32);
  app.add_option("--lr", c.base_lr, "learning rate for a global batch of --base-batch")->default_val(1e-3);
  app.add_option("--base-batch", c.base_batch, "the batch --lr is meant for")->default_val(32);
  app.add_option("--warmup-steps", c.warmup_steps, "steps of linear warm-up to the scaled rate")->default_val(20);
  app.add_option("--decay", c.decay, "after warm-up: cosine (to --min-lr-fraction at the last step) or constant")
      ->default_val("cosine")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--min-lr-fraction", c.min_lr_fraction, "the cosine's end, as a fraction of the scaled rate")->default_val(0.0);
  app.add_option("--optimizer", c.optimizer, "adamw or sgd (momentum 0.9)")->default_val("adamw")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--clip", c.clip,
                 "maximum gradient norm, 0 for none (ddp: the global gradient's; ps: each worker's own gradient, "
                 "before it is pushed)")
      ->default_val(1.0)
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--d-model", c.d_model, "model width")->default_val(64);
  app.add_option("--layers", c.layers, "encoder layers")->default_val(2);
  app.add_option("--seed", c.seed, "seed")->default_val(17);
  app.add_option("--prefetch", c.prefetch, "batches each data loader makes ahead")->default_val(2);
  app.add_option("--accumulate", c.accumulate, "micro-batches of --batch per optimizer step (the global batch grows with it)")
      ->default_val(1)
      ->check(CLI::Range(1, 1024));
}

// How the replicas train together, and checkpoints.
void add_strategy_options(CLI::App& app, railway_train::JobSpec& s) {
  auto& c = s.train;
  app.add_option("--strategy", c.strategy,
                 "ddp (gradients all-reduced every step), local-sgd (replicas step alone and average their "
                 "weights every --sync-every steps) or ps (parameter servers hold the weights and the optimizer)")
      ->default_val("ddp")
      ->check(CLI::IsMember({"ddp", "local-sgd", "ps", "pipeline"}));
  app.add_option("--pp", c.pp,
                 "pipeline: stages per replica, each a trainer running consecutive encoder layers (more than 1 "
                 "selects --strategy pipeline; default 2 with it)")
      ->check(CLI::Range(1, 64));
  app.add_option("--micro-batches", c.micro_batches, "pipeline: micro-batches each batch is split into (at least --pp)")
      ->default_val(8)
      ->check(CLI::Range(1, 4096));
  app.add_option("--ps-servers", c.ps_servers, "ps: server actors, each holding a shard of the parameters")
      ->default_val(2)
      ->check(CLI::Range(1, 64));
  app.add_option("--ps-restarts", c.ps_restarts,
                 "ps: how often a lost server restarts in place, its shard back from its newest checkpoint, while the "
                 "trainers carry on (0: the group restarts from the checkpoint instead)")
      ->default_val(3)
      ->check(CLI::Range(0, 1000));
  app.add_option("--ps-mode", c.ps_mode,
                 "ps: sync (all workers' gradients averaged into one step: DDP's training), async (each push "
                 "applied at once) or ssp:K (async, but no worker more than K steps ahead of the slowest)")
      ->default_val("sync")
      ->check([](const std::string& m) -> std::string {
        if (m == "sync" || m == "async") return "";
        if (m.rfind("ssp:", 0) == 0 && m.size() > 4 && m.size() < 11 &&
            m.find_first_not_of("0123456789", 4) == std::string::npos)
          return "";
        return "'" + m + "' is not a parameter-server mode: sync, async or ssp:K (K >= 0)";
      });
  app.add_option("--sync-every", c.sync_every, "local-sgd: steps between averages (1: the same steps as ddp with sgd)")
      ->default_val(4)
      ->check(CLI::Range(1, 100000));
  app.add_option("--checkpoint-every", s.checkpoint_every, "steps between checkpoints (and one at every epoch's end)")->default_val(100);
  app.add_option("--keep", s.keep, "checkpoints kept")->default_val(3);
  app.add_option("--checkpoint-replicas", s.checkpoint_replicas,
                 "checkpointers keeping every checkpoint, spread over the nodes (a node lost with its disk loses none)")
      ->default_val(2)
      ->check(CLI::Range(1, 8));
  app.add_option("--max-restarts", s.max_restarts, "group restarts (lost trainers) the job may make before it gives up")
      ->default_val(3)
      ->check(CLI::Range(0, 1000));
}

// The trainers' layout from --workers, --dp and --pp; "" when it can run, else why not (said before
// any actor starts).
std::string settle_layout(railway_train::JobSpec& s, int dp) {
  auto& c = s.train;
  if (c.pp > 1 && c.strategy == "ddp") c.strategy = "pipeline";
  if (c.strategy == "pipeline" && c.pp < 2) c.pp = 2;
  if (c.strategy != "pipeline" && c.pp > 1)
    return "--pp " + std::to_string(c.pp) + " splits the model into pipeline stages, which --strategy " + c.strategy +
           " does not do (use --strategy pipeline)";
  if (dp > 0) {
    s.workers = dp * static_cast<int>(c.pp);
    if (s.workers > 64) return "--dp " + std::to_string(dp) + " x --pp " + std::to_string(c.pp) + " is more than 64 trainers";
  }
  if (c.strategy == "ps" && c.ps_servers > yard::railway::railway_parameter_tensors(c.layers))
    return "parameter servers: " + std::to_string(c.ps_servers) + " servers for " +
           std::to_string(yard::railway::railway_parameter_tensors(c.layers)) +
           " parameter tensors: a server would hold nothing (a tensor is never split across servers)";
  if (s.min_workers > 0 && (c.strategy != "ddp" || c.accumulate != 1))
    return "an elastic group (--workers MIN:MAX) trains data parallel: --strategy ddp with --accumulate 1";
  if (c.strategy != "pipeline") return "";
  if (s.workers % c.pp != 0)
    return "--workers " + std::to_string(s.workers) + " is not a whole number of pipelines of --pp " + std::to_string(c.pp) +
           " stages (use --dp D for D pipelines)";
  try {
    yard::actors::check_pipeline(static_cast<int>(c.layers), static_cast<int>(c.pp), static_cast<int>(c.micro_batches), c.batch);
  } catch (const yard::actors::PipelineError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    init_cluster(argc, argv);
  } catch (const yard::Error& e) {  // no cluster to train on (wrong address, no token): said, not aborted
    std::fprintf(stderr, "railway-train: %s\n", e.what());
    return 1;
  }
  CLI::App app{"Train the railway defect model data-parallel on a Switchyard cluster.", "railway-train"};
  railway_train::JobSpec spec;
  add_job_options(app, spec);
  add_model_options(app, spec.train);
  add_strategy_options(app, spec);
  bool unbalanced = false;
  std::string resume;
  app.add_flag("--unaligned", spec.data.unaligned,
               "train on shards made without alignment (the baseline the aligner is measured against)");
  app.add_option("--balance", spec.train.balance,
                 "class-balanced epochs: a class's share of an epoch grows as its size^(1 - BALANCE) (1: equal shares, "
                 "0: plain epochs, every window once)")
      ->default_val(0.5)
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--unbalanced", unbalanced, "plain epochs (--balance 0)");
  int dp = 0;
  app.add_option("--dp", dp, "data-parallel replicas; with --pp P, D x P trainers (instead of --workers)")
      ->check(CLI::Range(1, 64))
      ->excludes(app.get_option("--workers"));
  app.add_option("--resume", resume,
                 "continue the run in this directory (OUT/checkpoints/run-...) from its newest checkpoint, with the "
                 "settings it was started with");
  CLI11_PARSE(app, argc, argv);
  if (!resume.empty()) {
    for (auto* o : app.get_options())
      if (o->count() > 0 && o->get_name() != "--resume") {
        std::fprintf(stderr, "railway-train: --resume continues a run with its own settings; %s cannot be changed\n",
                     o->get_name().c_str());
        return 2;
      }
    return railway_train::resume_job(resume);
  }
  if (unbalanced) spec.train.balance = 0;
  if (auto why = settle_layout(spec, dp); !why.empty()) {
    std::fprintf(stderr, "railway-train: %s\n", why.c_str());
    return 2;
  }
  // Run again by the cluster after the driver died (yard submit --max-retries): the run it was
  // making continues.
  if (const char* a = std::getenv("YARD_JOB_ATTEMPT"); a && std::atoi(a) > 1) {
    if (auto dir = railway_train::unfinished_run(spec.out); !dir.empty()) {
      std::printf("attempt %s of this job: continuing the run in %s\n", a, dir.c_str());
      std::fflush(stdout);
      return railway_train::resume_job(dir);
    }
  }
  return railway_train::run_job(spec);
}
