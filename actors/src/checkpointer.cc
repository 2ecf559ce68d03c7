#include "yard/actors/checkpointer.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/redis.h"

namespace yard::actors {

struct Checkpointer::Impl {
  std::string name;
  std::unique_ptr<sys::Redis> redis;  // null outside a cluster
  std::unique_ptr<CheckpointStore> store;
  std::string key() const { return "yard:ckpt:" + name + ":latest"; }
};

namespace {
std::unique_ptr<sys::Redis> connect_control_store() {
  if (!yard::is_initialized()) return nullptr;
  auto cs = yard::control_store();
  auto [host, port] = sys::split_address(cs.address);
  return std::make_unique<sys::Redis>(host, port, cs.password, std::chrono::seconds(5));
}
}  // namespace

Checkpointer::Checkpointer(std::string dir, int64_t keep, std::string name) : impl_(std::make_unique<Impl>()) {
  if (name.empty()) throw std::invalid_argument("Checkpointer: a name is needed (it keys the latest pointer)");
  make_background_thread();  // the actor's writes take the trainers' leftover time, not their cores
  impl_->name = std::move(name);
  impl_->redis = connect_control_store();
  auto* self = impl_.get();
  impl_->store = std::make_unique<CheckpointStore>(std::move(dir), static_cast<size_t>(std::max<int64_t>(1, keep)),
                                                   [self](uint64_t step, const std::string& path) {
                                                     if (self->redis)
                                                       self->redis->cmd({"HSET", self->key(), "step", std::to_string(step),
                                                                         "path", path});
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
  if (!impl_->redis) return -1;
  auto r = impl_->redis->cmd({"HGET", impl_->key(), "step"});
  return r.is_nil() ? -1 : std::stoll(r.str());
}

int Checkpointer::pid() { return getpid(); }
std::string Checkpointer::node() { return yard::node_id(); }

}  // namespace yard::actors

YARD_ACTOR(yard::actors::Checkpointer, yard::ctor<std::string, int64_t, std::string>, &yard::actors::Checkpointer::save,
           &yard::actors::Checkpointer::restore, &yard::actors::Checkpointer::part, &yard::actors::Checkpointer::skipped,
           &yard::actors::Checkpointer::latest_step, &yard::actors::Checkpointer::pid,
           &yard::actors::Checkpointer::node);
