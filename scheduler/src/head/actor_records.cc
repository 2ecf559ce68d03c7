// The actor manager's records: each actor's creation message kept (with its arguments) for
// restarts by a later head, and the actors read back after a takeover.
#include "head/actors.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "yard/errors.h"

namespace yard::sched {

using namespace detail;

namespace {
// Frames <-> one string, to keep an actor's creation message (arguments included) in Redis.
std::string pack_frames(const Frames& frames) {
  std::string out;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(frames.size());
  for (auto& f : frames) {
    put(f.size());
    out.append(static_cast<const char*>(f.data()), f.size());
  }
  return out;
}
Frames unpack_frames(const std::string& s) {
  Frames out;
  size_t off = 0;
  auto get = [&]() -> uint64_t {
    if (off + 8 > s.size()) throw Error("truncated actor record");
    uint64_t v;
    std::memcpy(&v, s.data() + off, 8);
    off += 8;
    return v;
  };
  uint64_t n = get();
  if (n > 1024) throw Error("corrupt actor record");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = get();
    if (off + len > s.size()) throw Error("truncated actor record");
    out.emplace_back(s.data() + off, len);
    off += len;
  }
  return out;
}
}  // namespace

// The actor's creation message, with its arguments as bytes, for restarts by a later head.
std::string ActorManager::actor_spec(const Actor& a) {
  OutMessage m(token_, 0, false);
  a.create_msg->rewind();
  auto src = a.create_msg->env().getBody().getCreateActor();
  m.env().getBody().setCreateActor(src);
  auto dst = m.env().getBody().getCreateActor();
  auto args = dst.initArgs(src.getArgs().size());
  for (unsigned i = 0; i < src.getArgs().size(); ++i) m.set_value(args[i], a.create_msg->value(src.getArgs()[i]));
  return pack_frames(m.finish());
}


void ActorManager::rebuild() {
  for (auto& id : tables_->actors.ids()) {
    auto rec = tables_->actors.get(id);
    if (!rec) continue;
    Actor a;
    static_cast<store::ActorRecord&>(a) = std::move(*rec);
    a.replied = true;
    if (auto spec = tables_->actors.spec(id)) {
      try {
        a.create_msg = std::make_shared<InMessage>(unpack_frames(*spec));
      } catch (const std::exception& e) {
        spdlog::error("actor {}: its creation record is unreadable ({}): it cannot be restarted", id, e.what());
      }
    }
    if (a.state != store::ActorState::kDead && !jobs_->running(a.job) && !a.detached) {
      a.state = store::ActorState::kDead;
      a.cause = "its job " + a.job + " ended while the head was down";
      kill_actor_process(a);
      tables_->actors.save(a);
    } else if (a.state == store::ActorState::kPending || a.state == store::ActorState::kRestarting) {
      if (a.create_msg) {
        a.node.clear();
        pending_actors_.push_back(id);
      } else {
        a.state = store::ActorState::kDead;
        a.cause = "the head was replaced before it was placed";
        tables_->actors.save(a);
      }
    }
    if (!a.name.empty() && a.state != store::ActorState::kDead) actor_names_[{a.ns, a.name}] = id;
    actors_.emplace(id, std::move(a));
  }
}

}  // namespace yard::sched
