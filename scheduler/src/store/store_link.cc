#include "store/tables.h"

#include <spdlog/spdlog.h>

#include "yard/internal/redis.h"
#include "yard/errors.h"

namespace yard::sched::store {

void StoreLink::write(std::vector<std::vector<std::string>> cmds) {
  if (gather_) {
    for (auto& c : cmds) gathered_.push_back(std::move(c));
  } else if (cmds.size() == 1) {
    cmd(cmds[0]);
  } else {
    run_all(cmds);
  }
}

void StoreLink::write_gathered() {
  if (!gathered_.empty()) pipeline({});
}

void StoreLink::put_back(std::vector<std::vector<std::string>> cmds) {
  cmds.insert(cmds.end(), std::make_move_iterator(gathered_.begin()), std::make_move_iterator(gathered_.end()));
  gathered_ = std::move(cmds);
}

void StoreLink::refused(const std::vector<std::vector<std::string>>& cmds, const std::vector<sys::RedisReply>& reps,
                        size_t n) {
  for (size_t i = 0; i < n && i < reps.size(); ++i)
    if (auto e = reps[i].error(); !e.empty())
      spdlog::error("Redis at {} refused {} {}: {}", r_.address(), cmds[i][0], cmds[i].size() > 1 ? cmds[i][1] : "", e);
}

sys::RedisReply StoreLink::cmd(const std::vector<std::string>& args) {
  if (gathered_.empty()) return r_.cmd(args);
  auto reps = pipeline({args});
  if (auto e = reps[0].error(); !e.empty()) throw Error("Redis at " + r_.address() + " refused " + args[0] + ": " + e);
  return std::move(reps[0]);
}

std::vector<sys::RedisReply> StoreLink::pipeline(const std::vector<std::vector<std::string>>& cmds) {
  if (gathered_.empty()) return r_.pipeline(cmds);
  // The gathered writes first, in the same round trip.
  auto all = std::move(gathered_);
  gathered_.clear();
  size_t n = all.size();
  all.insert(all.end(), cmds.begin(), cmds.end());
  std::vector<sys::RedisReply> reps;
  try {
    reps = r_.pipeline(all);
  } catch (...) {
    all.resize(n);
    put_back(std::move(all));  // written again later (each command sets what it sets: twice is harmless)
    throw;
  }
  refused(all, reps, n);
  std::vector<sys::RedisReply> mine;
  mine.reserve(cmds.size());
  for (size_t i = n; i < reps.size(); ++i) mine.push_back(std::move(reps[i]));
  return mine;
}

std::map<std::string, std::string> StoreLink::hgetall(const std::string& key) {
  write_gathered();
  return r_.hgetall(key);
}

void StoreLink::run_all(const std::vector<std::vector<std::string>>& cmds) {
  auto reps = pipeline(cmds);
  for (size_t i = 0; i < reps.size(); ++i)
    if (auto e = reps[i].error(); !e.empty()) throw Error("Redis at " + r_.address() + " refused " + cmds[i][0] + ": " + e);
}

std::vector<sys::RedisReply> StoreLink::each(const std::vector<std::string>& ids, const char* command,
                                             const std::function<std::string(const std::string&)>& key) {
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(ids.size());
  for (auto& id : ids) cmds.push_back({command, key(id)});
  if (cmds.empty()) return {};
  return pipeline(cmds);
}

void StoreLink::append_capped(const std::string& key, const std::vector<std::string>& items, long keep) {
  if (items.empty()) return;
  std::vector<std::string> push{"RPUSH", key};
  push.insert(push.end(), items.begin(), items.end());
  run_all({push, {"LTRIM", key, std::to_string(-keep), "-1"}, {"EXPIRE", key, "604800"}});
}

uint64_t StoreLink::reconnects() const { return r_.reconnects(); }
const std::string& StoreLink::address() const { return r_.address(); }

}  // namespace yard::sched::store
