// Trainer::regroup: an elastic group's next generation gets the most advanced member's state over
// the collective.
#include <cstring>
#include <stdexcept>

#include "yard/actors/torch_state.h"
#include "yard/actors/trainer.h"

namespace yard::actors {

namespace {

// The state one member sends the others: step, rate history, model, optimizer, job state.
class StateBlob {
 public:
  void put(int64_t v) { raw(&v, sizeof v); }
  void put(const std::string& s) {
    put(static_cast<int64_t>(s.size()));
    raw(s.data(), s.size());
  }
  std::string take() { return std::move(bytes_); }

 private:
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

class BlobReader {
 public:
  explicit BlobReader(const std::string& b) : b_(b) {}
  int64_t i64() {
    int64_t v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    auto n = i64();
    if (n < 0) throw std::runtime_error("regroup: a corrupt state blob (negative length)");
    need(static_cast<size_t>(n));
    std::string s = b_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }

 private:
  void need(size_t n) const {
    if (at_ + n > b_.size()) throw std::runtime_error("regroup: a truncated state blob");
  }
  const std::string& b_;
  size_t at_ = 0;
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
    StateBlob b;
    b.put(step_);
    b.put(static_cast<int64_t>(lr_sched_.changes.size()));
    for (auto& c : lr_sched_.changes) b.put(c.step), b.put(c.global_batch), b.put(c.total_steps);
    b.put(state_bytes(*model_));
    b.put(state_bytes(*opt_));
    b.put(r.extra);
    blob = b.take();
  }
  int64_t size = static_cast<int64_t>(blob.size());
  comm.broadcast(&size, 1, DType::kInt64, out.source);
  blob.resize(static_cast<size_t>(size));
  comm.broadcast(blob.data(), blob.size(), DType::kUInt8, out.source);
  out.bytes = blob.size();
  BlobReader in(blob);
  int64_t step = in.i64();
  std::vector<ElasticLr::Change> changes(static_cast<size_t>(in.i64()));
  for (auto& c : changes) c.step = in.i64(), c.global_batch = in.i64(), c.total_steps = in.i64();
  std::string model = in.str(), opt = in.str();
  r.extra = in.str();
  if (!send && mine != best) {
    load_state(*model_, model);
    load_state(*opt_, opt);
    out.loaded = true;
  }
  step_ = step;
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
