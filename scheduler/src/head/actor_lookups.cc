#include "head/actor_lookups.h"

#include <algorithm>

namespace yard::sched {

using namespace detail;

void fill_actor_info(wire::ActorInfo::Builder b, const store::ActorRecord& a) {
  b.setActorId(a.id);
  b.setClassName(a.class_name);
  b.setAddress(a.address);
  b.setState(detail::to_wire(a.state));
  b.setName(a.name);
  b.setWorkerId(a.worker);
  b.setDeathCause(a.cause);
  b.setNodeId(a.node);
  b.setNumRestarts(a.num_restarts);
  b.setWaiting(a.waiting);
}

void ActorLookups::wait(const std::string& id, const Incoming& in, std::chrono::seconds wait) {
  waiting_[id].push_back({in.routing_id, in.msg->env().getRequestId(), Clock::now() + wait});
}

void ActorLookups::extend(const std::string& id, std::chrono::seconds wait) {
  auto w = waiting_.find(id);
  if (w == waiting_.end()) return;
  for (auto& p : w->second) p.deadline = std::max(p.deadline, Clock::now() + wait);
}

void ActorLookups::answer(const store::ActorRecord& a, bool expired_only) {
  auto w = waiting_.find(a.id);
  if (w == waiting_.end()) return;
  auto now = Clock::now();
  auto& list = w->second;
  for (auto it = list.begin(); it != list.end();) {
    if (expired_only && it->deadline > now) {
      ++it;
      continue;
    }
    OutMessage m(token_, it->req, true);
    fill_actor_info(m.env().getBody().initActorInfo(), a);
    io_.reply(it->routing, m.finish());
    it = list.erase(it);
  }
  if (list.empty()) waiting_.erase(w);
}

void ActorLookups::expire(const std::function<const store::ActorRecord*(const std::string&)>& find) {
  std::vector<std::string> ids;
  for (auto& [id, list] : waiting_) ids.push_back(id);
  auto now = Clock::now();
  for (auto& id : ids) {
    if (const store::ActorRecord* a = find(id)) {
      answer(*a, true);
      continue;
    }
    auto& list = waiting_[id];
    for (auto it = list.begin(); it != list.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      OutMessage m(token_, it->req, true);
      set_error(m.env(), wire::ErrorCode::NOT_FOUND, "no actor " + id);
      io_.reply(it->routing, m.finish());
      it = list.erase(it);
    }
    if (list.empty()) waiting_.erase(id);
  }
}

}  // namespace yard::sched
