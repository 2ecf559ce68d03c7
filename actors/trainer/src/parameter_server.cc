// The parameter server actor and the worker's client.
#include "yard/actors/parameter_server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace yard::actors {

ParameterServer::ParameterServer(PsRecovery recovery) {
  restored_.pid = getpid();
  restored_.restarts = restart_count();
  if (restored_.restarts > 0 && !recovery.from.empty()) recover(recovery);
}

ParameterServer::~ParameterServer() = default;

// The newest checkpoint any of the checkpointers holds with this server's part, asked of all at
// once; a checkpointer that cannot answer (lost with its node) is passed over.
void ParameterServer::recover(const PsRecovery& r) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<ObjectRef<std::optional<CheckpointData>>> asked;
  for (auto& c : r.from) asked.push_back(c.call(&Checkpointer::part).remote(r.part));
  std::optional<CheckpointData> best;
  std::string errors;
  for (auto& a : asked) {
    try {
      auto got = *a.get(std::chrono::seconds(120));
      if (got && (!best || got->step > best->step)) best = std::move(got);
    } catch (const Error& e) {
      errors += std::string("; ") + e.what();
    }
  }
  if (!best)
    throw std::runtime_error("parameter server restarted, but no checkpoint holds its shard '" + r.part + "' yet" + errors);
  restore(r.cfg, std::move(best->blobs.at(r.part)));
  restored_.step = static_cast<int64_t>(best->step);
  restored_.version = shard_->version();
  restored_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

PsRestored ParameterServer::restored() { return restored_; }

int64_t ParameterServer::setup(PsShardConfig cfg, torch::Tensor initial) {
  if (cfg.threads > 0) torch::set_num_threads(cfg.threads);
  auto shard = std::make_unique<ParameterShard>(std::move(initial), cfg);
  int64_t n = shard->weights().numel();
  cond_.update([&] {
    shard_ = std::move(shard);
    wait_ms_ = cfg.wait_ms;
  });
  return n;
}

int64_t ParameterServer::restore(PsShardConfig cfg, std::string state) {
  if (cfg.threads > 0) torch::set_num_threads(cfg.threads);
  auto shard = ParameterShard::from_saved(state, cfg);
  int64_t n = shard->weights().numel();
  cond_.update([&] {
    shard_ = std::move(shard);
    wait_ms_ = cfg.wait_ms;
  });
  return n;
}

std::string ParameterServer::snapshot() {
  std::string out;
  cond_.read([&] {
    if (!shard_) throw std::logic_error("parameter server: snapshot before setup");
    out = shard_->save();
  });
  return out;
}

PsAck ParameterServer::push(int worker, int64_t step, int64_t batch, TensorView grad) {
  PsAck ack;
  cond_.update([&] {
    if (!shard_) throw std::logic_error("parameter server: push before setup");
    ack = shard_->push(worker, batch, grad.tensor(), step);
  });
  ack.restarts = restored_.restarts;
  return ack;
}

torch::Tensor ParameterServer::pull(int worker, int life) {
  if (life >= 0 && life != restored_.restarts) return torch::empty({0});
  torch::Tensor out;
  bool set_up = cond_.wait_for([&] { return shard_ != nullptr; }, std::chrono::milliseconds(wait_ms_));
  if (!set_up) throw TimeoutError("parameter server: pull before setup");
  bool ok = cond_.wait_for([&] { return shard_->may_pull(worker); }, std::chrono::milliseconds(wait_ms_),
                           [&] { out = shard_->pull(worker); });
  if (!ok)
    throw TimeoutError("parameter server (" + shard_->mode().name() + "): worker " + std::to_string(worker) +
                       " waited " + std::to_string(wait_ms_) + " ms for the other workers' pushes");
  return out;
}

PsJoin ParameterServer::join(int worker) {
  bool set_up = cond_.wait_for([&] { return shard_ != nullptr; }, std::chrono::milliseconds(wait_ms_));
  if (!set_up) throw TimeoutError("parameter server: join before setup");
  PsJoin j;
  cond_.read([&] { j = shard_->join(worker); });
  return j;
}

torch::Tensor ParameterServer::weights(int worker) {
  torch::Tensor out;
  cond_.update([&] {
    if (!shard_) throw std::logic_error("parameter server: weights before setup");
    out = shard_->pull(worker);
  });
  return out;
}

int ParameterServer::pid() { return getpid(); }

int64_t ParameterServer::version() {
  int64_t v = 0;
  cond_.read([&] { v = shard_ ? shard_->version() : 0; });
  return v;
}

namespace {
torch::Tensor flat_of(const std::vector<torch::Tensor>& ts, const std::vector<size_t>& which, bool grads) {
  std::vector<torch::Tensor> parts;
  for (size_t i : which) {
    auto t = grads ? ts[i].grad() : ts[i].detach();
    if (!t.defined()) t = torch::zeros_like(ts[i]);
    parts.push_back(t.reshape(-1));
  }
  return torch::cat(parts);
}
}  // namespace

ParameterClient::ParameterClient(std::shared_ptr<torch::nn::Module> model, std::vector<ActorHandle<ParameterServer>> servers,
                                 int worker, double clip)
    : servers_(std::move(servers)), worker_(worker), clip_(clip), model_(std::move(model)) {
  params_ = model_->parameters();
  std::vector<int64_t> sizes;
  for (auto& p : params_) sizes.push_back(p.numel());
  plan_ = plan_shards(sizes, static_cast<int>(servers_.size()));
  restarts_seen_.assign(servers_.size(), 0);
}

// A restart cuts off the calls running in the lost process (ActorRestarting); the call is made
// again against the restarted one. A server lost for good (ActorDied) ends the step.
namespace {
constexpr int kRetries = 8;  // calls made again for one server in one step before giving up on it
}  // namespace

template <class T, class Call>
T ParameterClient::retried(size_t s, Call&& call) {
  for (int attempt = 1;; ++attempt) {
    try {
      return call();
    } catch (const ActorRestarting& e) {
      if (attempt >= kRetries)
        throw ActorDied("parameter server " + std::to_string(s) + " restarted " + std::to_string(attempt) +
                        " times during one call: " + e.what());
    }
  }
}

void ParameterClient::note_restarts(size_t s, int restarts) {
  if (restarts <= restarts_seen_[s]) return;
  restarts_seen_[s] = restarts;
  restarts_.emplace_back(s, *servers_[s].call(&ParameterServer::restored).remote().get());
}

std::vector<std::pair<size_t, PsRestored>> ParameterClient::take_restarts() { return std::exchange(restarts_, {}); }

PsAck ParameterClient::push_to(size_t s, int64_t batch, const torch::Tensor& flat) {
  auto ack = retried<PsAck>(s, [&] {
    return *servers_[s].call(&ParameterServer::push).remote(worker_, steps_ + 1, batch, TensorView(flat)).get();
  });
  note_restarts(s, ack.restarts);
  return ack;
}

void ParameterClient::copy_in(size_t s, const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (size_t i : plan_[s]) {
    auto& p = params_[i];
    p.copy_(flat.slice(0, at, at + p.numel()).view_as(p));
    at += p.numel();
  }
}

void ParameterClient::initialise(const PsShardConfig& cfg) {
  std::vector<ObjectRef<int64_t>> done;
  for (size_t s = 0; s < servers_.size(); ++s)
    done.push_back(servers_[s].call(&ParameterServer::setup).remote(cfg, flat_of(params_, plan_[s], false)));
  for (auto& d : done) d.get();
}

void ParameterClient::restore(const PsShardConfig& cfg, const std::vector<std::string>& states) {
  if (states.size() != servers_.size())
    throw std::invalid_argument("the checkpoint holds " + std::to_string(states.size()) + " parameter-server shards, not " +
                                std::to_string(servers_.size()) + ": continue it with as many servers");
  std::vector<ObjectRef<int64_t>> done;
  for (size_t s = 0; s < servers_.size(); ++s) done.push_back(servers_[s].call(&ParameterServer::restore).remote(cfg, states[s]));
  for (size_t s = 0; s < servers_.size(); ++s) {
    int64_t want = 0;
    for (size_t i : plan_[s]) want += params_[i].numel();
    if (*done[s].get() != want)
      throw std::invalid_argument("parameter-server shard " + std::to_string(s) + " of the checkpoint does not fit this model");
  }
}

// The call on every server at once, each made again while its server restarts.
template <class T, class Method, class... Args>
std::vector<T> ParameterClient::on_every_server(Method method, const Args&... args) {
  std::vector<ObjectRef<T>> refs;
  for (auto& s : servers_) refs.push_back(s.call(method).remote(args...));
  std::vector<T> out;
  for (size_t s = 0; s < refs.size(); ++s)
    out.push_back(retried<T>(s, [&, first = true]() mutable {
      auto r = first ? refs[s] : servers_[s].call(method).remote(args...);
      first = false;
      return *r.get();
    }));
  return out;
}

std::vector<std::string> ParameterClient::snapshots() { return on_every_server<std::string>(&ParameterServer::snapshot); }

std::vector<int> ParameterClient::server_pids() { return on_every_server<int>(&ParameterServer::pid); }

void ParameterClient::pull() {
  auto flats = on_every_server<torch::Tensor>(&ParameterServer::pull, worker_, -1);
  for (size_t s = 0; s < flats.size(); ++s) copy_in(s, flats[s]);
}

int64_t ParameterClient::join() {
  auto joins = on_every_server<PsJoin>(&ParameterServer::join, worker_);
  auto flats = on_every_server<torch::Tensor>(&ParameterServer::weights, worker_);
  int64_t next = 0;
  for (size_t s = 0; s < joins.size(); ++s) {
    copy_in(s, flats[s]);
    if (joins[s].next_step > 0) next = next == 0 ? joins[s].next_step : std::min(next, joins[s].next_step);
  }
  if (next == 0) return -1;
  steps_ = next - 1;
  return steps_;
}

double ParameterClient::step(const std::vector<int64_t>& sizes, const std::function<torch::Tensor(size_t)>& loss_of) {
  int64_t local = 0;
  for (auto n : sizes) local += n;
  if (local <= 0) throw std::invalid_argument("ParameterClient::step: no samples");
  for (auto& p : params_) p.mutable_grad().reset();
  double loss_sum = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    auto loss = loss_of(i);
    double n = static_cast<double>(sizes[i]);
    (sizes.size() == 1 ? loss : loss * (n / static_cast<double>(local))).backward();
    loss_sum += loss.item<double>() * n;
  }
  if (clip_ > 0) torch::nn::utils::clip_grad_norm_(params_, clip_);
  // Every server's push, then every server's pull, all in flight together.
  std::vector<torch::Tensor> grads;
  std::vector<ObjectRef<PsAck>> acks;
  for (size_t s = 0; s < servers_.size(); ++s) {
    grads.push_back(flat_of(params_, plan_[s], true));
    acks.push_back(servers_[s].call(&ParameterServer::push).remote(worker_, steps_ + 1, local, TensorView(grads[s])));
  }
  std::vector<ObjectRef<torch::Tensor>> pulls(servers_.size());
  std::vector<PsAck> got(servers_.size());
  PsStepStats st;
  for (size_t s = 0; s < acks.size(); ++s) {
    try {
      got[s] = *acks[s].get();
      note_restarts(s, got[s].restarts);
    } catch (const ActorRestarting&) {
      got[s] = push_to(s, local, grads[s]);  // the restarted server's shard has not seen it
    }
    pulls[s] = servers_[s].call(&ParameterServer::pull).remote(worker_, got[s].restarts);
  }
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (int attempt = 1;; ++attempt) {
      torch::Tensor flat;
      try {
        flat = *pulls[s].get();
      } catch (const ActorRestarting&) {
      }
      if (flat.defined() && flat.numel() > 0) {
        copy_in(s, flat);
        break;
      }
      if (attempt >= kRetries)
        throw ActorDied("parameter server " + std::to_string(s) + " restarted " + std::to_string(attempt) + " times in one step");
      // The push was lost with the server's earlier process (while this pull waited, or before
      // it came): the restored shard has not seen it.
      got[s] = push_to(s, local, grads[s]);
      pulls[s] = servers_[s].call(&ParameterServer::pull).remote(worker_, got[s].restarts);
    }
    auto& a = got[s];
    st.max_ahead = std::max(st.max_ahead, a.ahead);
    st.max_stale_updates = std::max(st.max_stale_updates, a.stale_updates);
    if (s == 0) st.version = a.version;
  }
  last_ = st;
  ++steps_;
  return loss_sum;
}

}  // namespace yard::actors

YARD_ACTOR(yard::actors::ParameterServer, yard::ctor<yard::actors::PsRecovery>, &yard::actors::ParameterServer::setup, &yard::actors::ParameterServer::restore,
           &yard::actors::ParameterServer::snapshot, &yard::actors::ParameterServer::push,
           &yard::actors::ParameterServer::pull, &yard::actors::ParameterServer::version,
           &yard::actors::ParameterServer::pid, &yard::actors::ParameterServer::restored,
           &yard::actors::ParameterServer::join, &yard::actors::ParameterServer::weights);
