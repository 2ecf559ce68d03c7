// Trainer::regroup: an elastic group's next generation gets the most advanced member's state over
// the collective.
#include <stdexcept>
#include <vector>

#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"
#include "yard/codec.h"

namespace yard::actors {

namespace {

// The state one member sends the others.
struct SharedState {
  int64_t step = 0;
  std::vector<int64_t> change_steps, change_batches, change_totals;  // ElasticLr::changes
  std::string model, optimizer, extra;
  YARD_FIELDS(step, change_steps, change_batches, change_totals, model, optimizer, extra);
};

}  // namespace

Regrouped Trainer::regroup(collective::Communicator& comm, Regroup& r) {
  if (avg_) throw std::invalid_argument("an elastic group trains data parallel (DDP): periodic averaging cannot regroup");
  using collective::DType;
  const int world = comm.world_size();
  Regrouped out;
  // Who has state, and how far it got.
  int64_t mine = r.has_state ? step_ : -1;
  std::vector<int64_t> steps(static_cast<size_t>(world));
  comm.allgather(&mine, steps.data(), 1, DType::kInt64);
  int64_t best = -1;
  for (int k = 0; k < world; ++k)
    if (steps[static_cast<size_t>(k)] > best) best = steps[static_cast<size_t>(k)], out.source = k;
  if (best < 0) {
    // No member kept state: every one reads the same newest checkpoint (or starts fresh, the same
    // on every member by the job's seed); rank 0's then goes to all, so they are identical.
    out.from_disk = true;
    auto got = r.restore ? r.restore() : std::nullopt;
    step_ = got ? got->first : 0;
    if (got) r.extra = got->second;
    mine = step_;
    out.source = 0;
    best = step_;
    if (comm.rank() != 0) mine = -1;
  }
  const bool send = comm.rank() == out.source;
  std::string blob;
  if (send) {
    SharedState st;
    st.step = step_;
    for (auto& c : lr_sched_.changes)
      st.change_steps.push_back(c.step), st.change_batches.push_back(c.global_batch), st.change_totals.push_back(c.total_steps);
    st.model = state_bytes(*model_);
    st.optimizer = state_bytes(*opt_);
    st.extra = r.extra;
    auto b = Codec<SharedState>::encode(st);
    blob.assign(b->data(), b->size());
  }
  int64_t size = static_cast<int64_t>(blob.size());
  comm.broadcast(&size, 1, DType::kInt64, out.source);
  blob.resize(static_cast<size_t>(size));
  comm.broadcast(blob.data(), blob.size(), DType::kUInt8, out.source);
  out.bytes = blob.size();
  auto in = Codec<SharedState>::decode(blob.data(), blob.size());
  std::vector<ElasticLr::Change> changes;
  for (size_t k = 0; k < in.change_steps.size(); ++k)
    changes.push_back({in.change_steps[k], in.change_batches[k], in.change_totals[k]});
  r.extra = std::move(in.extra);
  if (!send && mine != best) {
    load_state(*model_, in.model);
    load_state(*opt_, in.optimizer);
    out.loaded = true;
  }
  step_ = in.step;
  lr_sched_.changes = std::move(changes);
  out.step = step_;
  // The linear scaling rule for the new global batch, reached over resize_warmup steps.
  int64_t now = lr_sched_.changes.empty() ? lr_sched_.base.global_batch : lr_sched_.changes.back().global_batch;
  if (r.global_batch > 0 && r.global_batch != now) {
    lr_sched_.resize_warmup = r.resize_warmup;
    lr_sched_.resize(step_, r.global_batch, r.total_steps ? r.total_steps(step_, r.extra) : 0);
  }
  if (ddp_)
    ddp_->rebind(comm);
  else
    ddp_ = std::make_unique<DistributedDataParallel>(model_, comm, o_.ddp);
  return out;
}

}  // namespace yard::actors
