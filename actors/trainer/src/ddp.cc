#include "yard/actors/ddp.h"

#include <chrono>
#include <cmath>

#include "yard/actors/schedule.h"
#include "yard/collective_torch.h"

namespace yard::actors {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> model,
                                                 collective::Communicator& comm, DdpOptions o)
    : model_(std::move(model)), comm_(&comm), o_(o) {
  for (auto& p : model_->parameters())
    if (p.requires_grad()) params_.push_back(p);
  // Buckets in reverse registration order, up to bucket_bytes each.
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  seen_.assign(params_.size(), false);
  size_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    size_t pb = static_cast<size_t>(params_[k].numel()) * params_[k].element_size();
    if (buckets_.empty() || (bytes + pb > o_.bucket_bytes && !buckets_.back().params.empty())) {
      buckets_.emplace_back();
      bytes = 0;
    }
    auto& b = buckets_.back();
    offset_of_[k] = b.size;
    b.size += params_[k].numel();
    b.params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += pb;
  }
  for (size_t i = 1; i < buckets_.size(); ++i)
    buckets_[i].flat = torch::zeros({buckets_[i].size}, params_[buckets_[i].params.front()].options());
  size_first_bucket();
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].register_hook([this, k](torch::Tensor g) {
      on_grad(k, g);
      return g;
    });
}

DistributedDataParallel::~DistributedDataParallel() { drain(); }

void DistributedDataParallel::size_first_bucket() {
  if (buckets_.empty()) return;
  // After the gradients: the rank's batch size, summed over the ranks, then a slot per rank for
  // its rate (the others' slots zero, so the sum is every rank's rate exactly).
  auto& b = buckets_[0];
  count_at_ = b.size;
  b.flat = torch::zeros({b.size + 1 + comm_->world_size()}, params_[b.params.front()].options());
  rates_.assign(static_cast<size_t>(comm_->world_size()), 0.0);
}

void DistributedDataParallel::drain() {
  for (auto& b : buckets_) {
    if (b.work) try {
        b.work->wait();
      } catch (...) {
      }
    b.work.reset();
  }
  in_step_ = false;
}

void DistributedDataParallel::rebind(collective::Communicator& comm) {
  drain();
  bool resized = comm.world_size() != comm_->world_size();
  comm_ = &comm;
  if (resized) size_first_bucket();
}

void DistributedDataParallel::broadcast_state(int root) {
  torch::NoGradGuard ng;
  for (auto& p : model_->parameters()) {
    auto t = p.detach();
    collective::broadcast(*comm_, t, root);
  }
  for (auto& b : model_->buffers()) {
    auto t = b.detach();
    collective::broadcast(*comm_, t, root);
  }
}

void DistributedDataParallel::begin_step(int64_t local_batch, double rate) {
  if (no_sync_) return;
  if (local_batch < 0) throw std::invalid_argument("DDP: negative batch size");
  // Each rank's loss is a mean over its own batch: its gradient times its batch size is its
  // share of the sum over the global batch. The sizes travel with the first bucket, and
  // finish_step divides by their sum: no extra round trip (or meeting point) per step.
  scale_ = static_cast<double>(local_batch);
  if (!buckets_.empty()) {
    auto tail = buckets_[0].flat.narrow(0, count_at_, 1 + comm_->world_size());
    tail.zero_();
    tail[0].fill_(static_cast<double>(local_batch));
    tail[1 + comm_->rank()].fill_(std::isfinite(rate) && rate > 0 ? rate : 0.0);
  }
  for (auto& b : buckets_) {
    b.ready = 0;
    b.work.reset();
  }
  std::fill(seen_.begin(), seen_.end(), false);
  next_launch_ = 0;
  in_step_ = true;
}

void DistributedDataParallel::on_grad(size_t k, const torch::Tensor& g) {
  if (!in_step_ || no_sync_ || seen_[k]) return;
  torch::NoGradGuard ng;
  fill_slot(k, g);
  if (o_.overlap) launch_ready();
}

void DistributedDataParallel::fill_slot(size_t k, const torch::Tensor& g) {
  auto& b = buckets_[bucket_of_[k]];
  auto part = b.flat.narrow(0, offset_of_[k], params_[k].numel());
  // The gradient .grad will hold after this backward: what earlier no_sync steps accumulated plus
  // this one (g, undefined for a parameter this backward did not reach).
  auto cur = params_[k].grad();
  auto total = cur.defined() && g.defined() ? cur + g : cur.defined() ? cur : g;
  if (total.defined())
    torch::mul_out(part, total.reshape({-1}), torch::scalar_tensor(scale_, total.options()));
  else
    part.zero_();
  seen_[k] = true;
  ++b.ready;
}

void DistributedDataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    auto& b = buckets_[next_launch_++];
    b.work = collective::allreduce_async(*comm_, b.flat, collective::ReduceOp::kSum);
  }
}

void DistributedDataParallel::finish_step() {
  if (no_sync_) return;
  if (!in_step_) throw std::runtime_error("DDP: finish_step without begin_step");
  torch::NoGradGuard ng;
  // Parameters that got no gradient this backward contribute what they accumulated (or zeros),
  // so every bucket completes.
  for (size_t k = 0; k < params_.size(); ++k)
    if (!seen_[k]) fill_slot(k, torch::Tensor());
  launch_ready();
  auto w0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) b.work->wait();
  wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  in_step_ = false;
  if (buckets_.empty()) return;
  auto tail = buckets_[0].flat.narrow(0, count_at_, 1 + comm_->world_size()).to(torch::kDouble);
  auto t = tail.accessor<double, 1>();
  for (size_t r = 0; r < rates_.size(); ++r) rates_[r] = t[static_cast<int64_t>(r) + 1];
  double n = t[0];
  if (n <= 0) throw std::runtime_error("DDP: the global batch is empty");
  global_batch_ = static_cast<int64_t>(std::llround(n));
  auto inv = torch::scalar_tensor(1.0 / n, buckets_[0].flat.options());
  for (size_t k = 0; k < params_.size(); ++k) {
    auto& p = params_[k];
    auto reduced = buckets_[bucket_of_[k]].flat.narrow(0, offset_of_[k], p.numel()).view_as(p);
    if (p.grad().defined()) torch::mul_out(p.mutable_grad(), reduced, inv);
    else p.mutable_grad() = reduced * inv;
  }
}

double scaled_lr(double base_lr, int64_t base_batch, int64_t global_batch, int64_t step, int64_t warmup_steps) {
  LrSchedule s;
  s.base_lr = base_lr;
  s.base_batch = base_batch;
  s.global_batch = global_batch;
  s.warmup_steps = warmup_steps;
  return s.at(step);
}

}  // namespace yard::actors
