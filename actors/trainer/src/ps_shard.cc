// The parameter server's pure parts: the shard plan, the modes, one shard's rules.
#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "yard/actors/parameter_server.h"

namespace yard::actors {

std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& sizes, int servers) {
  if (servers < 1) throw std::invalid_argument("parameter servers: need at least one server, not " + std::to_string(servers));
  std::vector<size_t> order;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 0) order.push_back(i);
  if (order.size() < static_cast<size_t>(servers))
    throw std::invalid_argument("parameter servers: " + std::to_string(servers) + " servers for " +
                                std::to_string(order.size()) + " parameter tensors: a server would hold nothing");
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<std::vector<size_t>> plan(static_cast<size_t>(servers));
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  for (size_t i : order) {
    auto s = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    plan[s].push_back(i);
    load[s] += sizes[i];
  }
  for (auto& p : plan) std::sort(p.begin(), p.end());
  return plan;
}

PsMode PsMode::parse(const std::string& text) {
  PsMode m;
  if (text == "sync") return m;
  if (text == "async") {
    m.kind = Kind::kAsync;
    return m;
  }
  if (text.rfind("ssp:", 0) == 0) {
    std::string k = text.substr(4);
    if (!k.empty() && k.size() < 7 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      m.staleness = std::stoi(k);
      if (m.staleness > 0) m.kind = Kind::kBoundedStaleness;
      return m;
    }
  }
  throw std::invalid_argument("unknown parameter-server mode '" + text + "' (sync, async or ssp:K with K >= 0)");
}

std::string PsMode::name() const {
  switch (kind) {
    case Kind::kSync: return "sync";
    case Kind::kAsync: return "async";
    case Kind::kBoundedStaleness: return "ssp:" + std::to_string(staleness);
  }
  return "?";
}

LrSchedule PsShardConfig::schedule() const {
  LrSchedule s;
  s.base_lr = base_lr;
  s.base_batch = base_batch;
  s.global_batch = global_batch;
  s.warmup_steps = warmup_steps;
  s.decay = LrSchedule::parse(decay);
  s.total_steps = total_steps;
  s.final_fraction = final_fraction;
  return s;
}

ParameterShard::ParameterShard(torch::Tensor initial, const PsShardConfig& cfg)
    : mode_(PsMode::parse(cfg.mode)), schedule_(cfg.schedule()) {
  if (cfg.workers < 1) throw std::invalid_argument("parameter servers: need at least one worker, not " + std::to_string(cfg.workers));
  if (initial.dim() != 1 || initial.numel() == 0 || !initial.is_floating_point())
    throw std::invalid_argument("parameter servers: a shard's initial values must be a non-empty flat floating-point tensor");
  weights_ = initial.detach().clone().set_requires_grad(true);
  if (cfg.optimizer == "adamw")
    opt_ = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{weights_},
                                                 torch::optim::AdamWOptions(schedule_.base_lr).weight_decay(cfg.weight_decay));
  else if (cfg.optimizer == "sgd")
    opt_ = std::make_unique<torch::optim::SGD>(
        std::vector<torch::Tensor>{weights_},
        torch::optim::SGDOptions(schedule_.base_lr).momentum(cfg.momentum).weight_decay(cfg.weight_decay));
  else
    throw std::invalid_argument("unknown optimizer '" + cfg.optimizer + "' (adamw or sgd)");
  steps_.assign(static_cast<size_t>(cfg.workers), 0);
  seen_.assign(static_cast<size_t>(cfg.workers), 0);
  ahead_.assign(static_cast<size_t>(cfg.workers), 0);
  last_push_.assign(static_cast<size_t>(cfg.workers), 0);
}

void ParameterShard::check_worker(int worker) const {
  if (worker < 0 || static_cast<size_t>(worker) >= steps_.size())
    throw std::invalid_argument("parameter server: worker " + std::to_string(worker) + " is not one of its " +
                                std::to_string(steps_.size()) + " workers");
}

int64_t ParameterShard::slowest() const { return *std::min_element(steps_.begin(), steps_.end()); }

void ParameterShard::apply(const torch::Tensor& grad) {
  weights_.mutable_grad() = grad;
  for (auto& g : opt_->param_groups()) g.options().set_lr(schedule_.at(version_));
  opt_->step();
  ++version_;
}

PsAck ParameterShard::push(int worker, int64_t batch, const torch::Tensor& grad, int64_t step) {
  check_worker(worker);
  if (grad.numel() != weights_.numel())
    throw std::invalid_argument("parameter server: a gradient of " + std::to_string(grad.numel()) +
                                " elements for a shard of " + std::to_string(weights_.numel()));
  if (batch <= 0) throw std::invalid_argument("parameter server: a push for an empty batch");
  auto w = static_cast<size_t>(worker);
  torch::NoGradGuard no_grad;
  PsAck ack;
  ack.stale_updates = version_ - seen_[w];
  ack.ahead = ahead_[w];
  // A step this shard has from the worker already: pushed again by a replacement that redoes the
  // step its lost predecessor had pushed here but not to every server. The first push counts.
  if (step > 0 && step <= last_push_[w] && !(mode_.kind == PsMode::Kind::kSync && step < gathering_)) {
    ack.version = version_;
    ack.steps = steps_[w];
    return ack;
  }
  ++steps_[w];
  auto g = grad.to(weights_.scalar_type()).reshape(-1);
  if (mode_.kind == PsMode::Kind::kSync) {
    gather(w, step, batch, g);
  } else {
    if (step > 0) last_push_[w] = step;
    apply(g.clone());
  }
  ack.version = version_;
  ack.steps = steps_[w];
  return ack;
}

// Sync: the step being gathered takes one push from every worker, then its batch-weighted mean is
// applied. After a restore the shard does not know which step the workers are at: the first push
// says. A push for an earlier step than the one gathered adds nothing (that step was applied in
// the lost process, whose updates since the checkpoint are gone); one for a later step means the
// gathered step was completed there, so its partial sum is dropped and its pushers may pull.
void ParameterShard::gather(size_t w, int64_t step, int64_t batch, const torch::Tensor& g) {
  if (step <= 0) step = gathering_ > 0 ? gathering_ : 1;
  if (gathering_ == 0) gathering_ = step;
  if (step < gathering_) {
    last_push_[w] = step;
    return;
  }
  if (step > gathering_) start_gather(step);
  if (last_push_[w] == step)  // an unnumbered push, twice (a numbered one again is dropped by push())
    throw std::logic_error("parameter server: worker " + std::to_string(w) + " pushed step " + std::to_string(step) +
                           " twice: a push before the update of its previous step");
  last_push_[w] = step;
  // The global-batch mean: each worker's mean weighted by its batch.
  if (arrived_ == 0) {
    sum_ = g * static_cast<double>(batch);
  } else {
    sum_.add_(g, static_cast<double>(batch));
  }
  sum_batch_ += batch;
  if (++arrived_ == static_cast<int>(steps_.size())) {
    apply(sum_.div_(static_cast<double>(sum_batch_)));
    start_gather(step + 1);
  }
}

void ParameterShard::start_gather(int64_t step) {
  sum_ = torch::Tensor();
  sum_batch_ = 0;
  arrived_ = 0;
  gathering_ = step;
}

bool ParameterShard::may_pull(int worker) const {
  check_worker(worker);
  auto w = static_cast<size_t>(worker);
  switch (mode_.kind) {
    case PsMode::Kind::kSync: return last_push_[w] == 0 || last_push_[w] < gathering_;
    case PsMode::Kind::kAsync: return true;
    case PsMode::Kind::kBoundedStaleness: return steps_[w] - slowest() <= mode_.staleness;
  }
  return true;
}

PsJoin ParameterShard::join(int worker) const {
  check_worker(worker);
  auto w = static_cast<size_t>(worker);
  PsJoin j;
  if (mode_.kind == PsMode::Kind::kSync) {
    // The gathered step, or the next one when the worker's push for it is here already.
    if (gathering_ > 0) j.next_step = last_push_[w] == gathering_ ? gathering_ + 1 : gathering_;
  } else if (last_push_[w] > 0) {
    j.next_step = last_push_[w] + 1;
  }
  j.version = version_;
  return j;
}

torch::Tensor ParameterShard::pull(int worker) {
  check_worker(worker);
  seen_[static_cast<size_t>(worker)] = version_;
  ahead_[static_cast<size_t>(worker)] = steps_[static_cast<size_t>(worker)] - slowest();
  return weights_.detach().clone();
}

}  // namespace yard::actors

namespace yard::actors {

std::string ParameterShard::save() const {
  torch::serialize::OutputArchive a, opt;
  a.write("weights", weights_.detach());
  a.write("version", torch::tensor({version_}, torch::kInt64));
  opt_->save(opt);
  a.write("optimizer", opt);
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}

struct ParameterShard::Saved {
  torch::Tensor weights, version;
  torch::serialize::InputArchive optimizer;
};

ParameterShard::Saved ParameterShard::read_saved(const std::string& bytes) {
  Saved s;
  torch::serialize::InputArchive a;
  try {
    std::istringstream in(bytes);
    a.load_from(in);
    a.read("weights", s.weights);
    a.read("version", s.version);
    a.read("optimizer", s.optimizer);
  } catch (const c10::Error& e) {
    throw std::runtime_error("a parameter-server shard's saved state does not read: " + std::string(e.what_without_backtrace()));
  }
  return s;
}

std::unique_ptr<ParameterShard> ParameterShard::from_saved(const std::string& bytes, const PsShardConfig& cfg) {
  auto saved = read_saved(bytes);
  auto shard = std::make_unique<ParameterShard>(saved.weights.reshape(-1), cfg);
  shard->take(saved);
  return shard;
}

void ParameterShard::load(const std::string& bytes) {
  auto saved = read_saved(bytes);
  take(saved);
}

void ParameterShard::take(Saved& saved) {
  if (saved.weights.numel() != weights_.numel() || saved.version.numel() != 1)
    throw std::runtime_error("a parameter-server shard's saved state holds " + std::to_string(saved.weights.numel()) +
                             " weights, this shard " + std::to_string(weights_.numel()));
  torch::NoGradGuard no_grad;
  weights_.copy_(saved.weights.reshape(-1));
  opt_->load(saved.optimizer);
  version_ = saved.version.item<int64_t>();
  std::fill(steps_.begin(), steps_.end(), mode_.kind == PsMode::Kind::kSync ? version_ : 0);
  std::fill(seen_.begin(), seen_.end(), version_);
  std::fill(ahead_.begin(), ahead_.end(), 0);
  std::fill(last_push_.begin(), last_push_.end(), 0);
  start_gather(0);
}

}  // namespace yard::actors
