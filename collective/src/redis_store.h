// A Gloo rendezvous store on the project's Redis client. Keys live under
// "yard:coll:<group>:<generation>:" and expire after a day as a safety net; remove_all() deletes
// them when the group is destroyed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "yard/redis.h"

namespace yard::collective {

class RedisStore : public gloo::rendezvous::Store {
 public:
  RedisStore(const std::string& address, const std::string& password, std::string prefix,
             std::string group, std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // The value if the key is there now, else "" (no waiting).
  std::string peek(const std::string& key);
  // Deletes every key of this prefix.
  void remove_all();
  void erase(const std::string& key);
  long long incr(const std::string& key);
  const std::string& prefix() const { return prefix_; }

 private:
  std::unique_ptr<sys::Redis> redis_;
  std::string prefix_, group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace yard::collective
