// Lookups of an actor by id (GetActor, or a creation sent again) that wait for it to come up,
// move or die: each is answered with the actor's record when that happens, or as the actor stands
// at its deadline.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/service.h"
#include "store/tables.h"

namespace yard::sched {

// An actor's record as the wire's ActorInfo.
void fill_actor_info(wire::ActorInfo::Builder b, const store::ActorRecord& a);

class ActorLookups {
 public:
  ActorLookups(detail::Messenger& io, const std::string& token) : io_(io), token_(token) {}
  // `in` waits for actor `id` at most `wait`.
  void wait(const std::string& id, const Incoming& in, std::chrono::seconds wait);
  // The actor's waiting lookups answered with its record (with expired_only: those past their
  // deadline).
  void answer(const store::ActorRecord& a, bool expired_only = false);
  bool waiting(const std::string& id) const { return waiting_.count(id) > 0; }
  // The actor's creation arrived: its lookups (asked before it did) wait `wait` from now for it
  // to come up, as lookups of a known actor do.
  void extend(const std::string& id, std::chrono::seconds wait);
  // Lookups past their deadline answered; `find` gives an actor's record (null: none by that id,
  // not even one whose creation was in flight when it was asked: NOT_FOUND).
  void expire(const std::function<const store::ActorRecord*(const std::string&)>& find);

 private:
  detail::Messenger& io_;
  const std::string& token_;
  std::map<std::string, std::vector<PendingReply>> waiting_;  // by actor id
};

}  // namespace yard::sched
