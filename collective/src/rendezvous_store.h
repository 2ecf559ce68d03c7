// A group's rendezvous: a Gloo store over the group's yard::Rendezvous (GroupSpec::rendezvous),
// its keys under "<group>:<generation>:" so that a re-created group never meets stale keys.
// remove_all() deletes them when the group is destroyed; the store keeps none longer than a day.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "yard/job_store.h"

namespace yard::collective {

class GroupStore : public gloo::rendezvous::Store {
 public:
  // `store` is not null (create_group refuses a spec without one).
  GroupStore(std::shared_ptr<Rendezvous> store, const std::string& group, const std::string& generation,
             std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (up to the timeout) for the key, then reads it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // The value if the key is there now, else "" (no waiting).
  std::string peek(const std::string& key);
  // Deletes every key of this group and generation.
  void remove_all();
  void erase(const std::string& key);
  long long incr(const std::string& key);

 private:
  // Runs fn; a store's error becomes a CollectiveError naming the group.
  template <class F>
  auto guarded(F&& fn) -> decltype(fn());
  std::shared_ptr<Rendezvous> store_;
  std::string prefix_, group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace yard::collective
