#include "yard/actors/local_sgd.h"

#include <functional>
#include <stdexcept>
#include <string>

#include "yard/collective_torch.h"

namespace yard::actors {

PeriodicAveraging::PeriodicAveraging(std::shared_ptr<torch::nn::Module> model, collective::Communicator& comm, int every)
    : model_(std::move(model)), comm_(comm), every_(every) {
  if (every_ < 1) throw std::invalid_argument("periodic averaging needs every >= 1 step, not " + std::to_string(every));
}

namespace {
// The replicas' state as one flat tensor (float32 when all of it is, else float64), handed to `op`
// (a collective on it), then written back into the state.
void through_flat(const std::vector<torch::Tensor>& st, const std::function<void(torch::Tensor&)>& op) {
  torch::NoGradGuard no_grad;
  auto type = torch::kFloat32;
  for (auto& t : st)
    if (t.scalar_type() != torch::kFloat32) type = torch::kFloat64;
  std::vector<torch::Tensor> parts;
  for (auto& t : st) parts.push_back(t.detach().to(type).reshape(-1));
  auto flat = torch::cat(parts);
  op(flat);
  int64_t at = 0;
  for (auto t : st) {
    t.copy_(flat.slice(0, at, at + t.numel()).view_as(t));
    at += t.numel();
  }
}
}  // namespace

std::vector<torch::Tensor> PeriodicAveraging::state() const {
  std::vector<torch::Tensor> out;
  for (auto& p : model_->parameters()) out.push_back(p);
  for (auto& b : model_->buffers())
    if (b.is_floating_point()) out.push_back(b);
  return out;
}

void PeriodicAveraging::broadcast_state(int root) {
  through_flat(state(), [&](torch::Tensor& flat) { collective::broadcast(comm_, flat, root); });
  samples_since_ = 0;
}

bool PeriodicAveraging::step_done(int64_t local_batch) {
  samples_since_ += local_batch;
  if (++steps_ % every_ != 0) return false;
  average();
  return true;
}

void PeriodicAveraging::average() {
  // The weights first (one small collective), then each replica's state times its share, summed.
  auto total = torch::tensor({samples_since_}, torch::kInt64);
  collective::allreduce(comm_, total, collective::ReduceOp::kSum);
  int64_t n = total.item<int64_t>();
  if (n == 0) throw std::runtime_error("periodic averaging: no replica trained on any sample since the last average");
  double share = double(samples_since_) / double(n);
  through_flat(state(), [&](torch::Tensor& flat) {
    flat.mul_(share);
    collective::allreduce(comm_, flat, collective::ReduceOp::kSum);
  });
  samples_since_ = 0;
}

}  // namespace yard::actors
