#include "yard/actors/checkpointer.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "yard/job_store.h"
#include "yard/process.h"

namespace yard::actors {

struct Checkpointer::Impl {
  std::string name;
  bool in_cluster = false;  // records its checkpoints in the job's checkpoint records
  std::unique_ptr<CheckpointStore> store;
};

Checkpointer::Checkpointer(std::string dir, int64_t keep, std::string name) : impl_(std::make_unique<Impl>()) {
  if (name.empty()) throw std::invalid_argument("Checkpointer: a name is needed (it keys the latest pointer)");
  make_background_thread();  // the actor's writes take the trainers' leftover time, not their cores
  impl_->name = std::move(name);
  impl_->in_cluster = yard::is_initialized();
  auto* self = impl_.get();
  impl_->store = std::make_unique<CheckpointStore>(std::move(dir), static_cast<size_t>(std::max<int64_t>(1, keep)),
                                                   [self](uint64_t step, const std::string& path) {
                                                     if (self->in_cluster) yard::record_checkpoint(self->name, {step, path});
                                                   });
}

Checkpointer::~Checkpointer() = default;

std::string Checkpointer::save(CheckpointData c) {
  Checkpoint k;
  k.step = c.step;
  k.blobs = std::move(c.blobs);
  return impl_->store->write(k);
}

std::optional<CheckpointData> Checkpointer::restore() {
  auto c = impl_->store->restore();
  for (auto& why : impl_->store->skipped()) spdlog::warn("checkpointer {}: skipped {}", impl_->name, why);
  if (!c) return std::nullopt;
  return CheckpointData{c->step, std::move(c->blobs)};
}

std::optional<CheckpointData> Checkpointer::part(std::string blob) {
  for (auto& path : impl_->store->list()) {
    try {
      auto c = CheckpointStore::read_file(path);
      auto it = c.blobs.find(blob);
      if (it == c.blobs.end()) continue;
      CheckpointData out{c.step, {}};
      out.blobs[blob] = std::move(it->second);
      return out;
    } catch (const std::exception& e) {
      spdlog::warn("checkpointer {}: skipped {}: {}", impl_->name, path, e.what());
    }
  }
  return std::nullopt;
}

std::vector<std::string> Checkpointer::skipped() { return impl_->store->skipped(); }

int64_t Checkpointer::latest_step() {
  if (!impl_->in_cluster) return -1;
  auto r = yard::latest_checkpoint(impl_->name);
  return r ? static_cast<int64_t>(r->step) : -1;
}

int Checkpointer::pid() { return getpid(); }
std::string Checkpointer::node() { return yard::node_id(); }

}  // namespace yard::actors

YARD_ACTOR(yard::actors::Checkpointer, yard::ctor<std::string, int64_t, std::string>, &yard::actors::Checkpointer::save,
           &yard::actors::Checkpointer::restore, &yard::actors::Checkpointer::part, &yard::actors::Checkpointer::skipped,
           &yard::actors::Checkpointer::latest_step, &yard::actors::Checkpointer::pid,
           &yard::actors::Checkpointer::node);
