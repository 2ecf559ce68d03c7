#include "redis_store.h"

#include <thread>

#include "yard/process.h"
#include "yard/collective.h"

namespace yard::collective {

RedisStore::RedisStore(const std::string& address, const std::string& password, std::string prefix,
                       std::string group, std::chrono::milliseconds timeout)
    : prefix_(std::move(prefix)), group_(std::move(group)), timeout_(timeout) {
  auto [host, port] = sys::split_address(address);
  try {
    redis_ = std::make_unique<sys::Redis>(host, port, password, std::chrono::seconds(5));
  } catch (const Error& e) {
    throw CollectiveError("group '" + group_ + "': cannot reach the rendezvous store: " + e.what());
  }
}

void RedisStore::set(const std::string& key, const std::vector<char>& data) {
  redis_->cmd({"SET", prefix_ + key, std::string(data.begin(), data.end()), "EX", "86400"});
}

std::vector<char> RedisStore::get(const std::string& key) {
  wait({key});
  auto r = redis_->cmd({"GET", prefix_ + key});
  auto s = r.str();
  return std::vector<char>(s.begin(), s.end());
}

std::string RedisStore::peek(const std::string& key) {
  auto r = redis_->cmd({"GET", prefix_ + key});
  return r.is_nil() ? std::string() : r.str();
}

void RedisStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RedisStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  std::vector<std::string> missing = keys;
  for (;;) {
    std::vector<std::string> still;
    for (auto& k : missing)
      if (redis_->cmd({"EXISTS", prefix_ + k}).integer() == 0) still.push_back(k);
    if (still.empty()) return;
    missing.swap(still);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (auto& k : missing) names += (names.empty() ? "" : ", ") + k;
      throw CollectiveError("group '" + group_ + "': members did not arrive within " +
                            std::to_string(timeout.count()) + " ms (missing keys: " + names + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

long long RedisStore::incr(const std::string& key) {
  auto v = redis_->cmd({"INCR", prefix_ + key}).integer();
  redis_->cmd({"EXPIRE", prefix_ + key, "86400"});
  return v;
}

void RedisStore::erase(const std::string& key) { redis_->cmd({"DEL", prefix_ + key}); }

void RedisStore::remove_all() {
  std::string cursor = "0";
  do {
    auto r = redis_->cmd({"SCAN", cursor, "MATCH", prefix_ + "*", "COUNT", "1000"});
    // SCAN replies [cursor, [keys...]]: read through the generic reply.
    auto all = r.strings();
    cursor = all.empty() ? "0" : all[0];
    auto keys = r.nested_strings(1);
    if (!keys.empty()) {
      std::vector<std::string> del{"DEL"};
      del.insert(del.end(), keys.begin(), keys.end());
      redis_->cmd(del);
    }
  } while (cursor != "0");
}

}  // namespace yard::collective
