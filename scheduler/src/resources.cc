#include "resources.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"
#include "yard/errors.h"

namespace yard::sched {

namespace {

// KEYS: avail hashes. ARGV: n, then n triples (key index, resource, amount).
// Sums what each key is asked for, checks all, then takes all: one atomic step.
const char* kReserve = R"lua(
local n = tonumber(ARGV[1])
local need = {}
for i = 0, n - 1 do
  local k = tonumber(ARGV[2 + i * 3])
  local name = ARGV[3 + i * 3]
  local amt = tonumber(ARGV[4 + i * 3])
  need[k] = need[k] or {}
  need[k][name] = (need[k][name] or 0) + amt
end
for k, res in pairs(need) do
  if redis.call('EXISTS', KEYS[k]) == 0 then return {0, KEYS[k], 'gone'} end
  for name, amt in pairs(res) do
    if amt > 0 then
      local have = tonumber(redis.call('HGET', KEYS[k], name) or '0')
      if have + 1e-9 < amt then return {0, KEYS[k], name} end
    end
  end
end
for k, res in pairs(need) do
  for name, amt in pairs(res) do
    if amt > 0 then redis.call('HINCRBYFLOAT', KEYS[k], name, -amt) end
  end
end
local h = 2 + n * 3
if ARGV[h] and ARGV[h] ~= '' then
  local args = {}
  for i = h + 1, #ARGV do args[#args + 1] = ARGV[i] end
  redis.call('HSET', ARGV[h], unpack(args))
end
return {1}
)lua";

// KEYS: avail1, total1, avail2, total2, ... ARGV: n, then n triples (pair index, resource, amount).
const char* kRelease = R"lua(
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local p = tonumber(ARGV[2 + i * 3])
  local a, t = KEYS[2 * p - 1], KEYS[2 * p]
  local name = ARGV[3 + i * 3]
  local amt = tonumber(ARGV[4 + i * 3])
  if amt > 0 and redis.call('EXISTS', a) == 1 then
    local total = tonumber(redis.call('HGET', t, name) or '0')
    local now = tonumber(redis.call('HINCRBYFLOAT', a, name, amt))
    if now > total then redis.call('HSET', a, name, tostring(total)) end
  end
end
for d = 2 + n * 3, #ARGV do redis.call('DEL', ARGV[d]) end
return 1
)lua";

// Runs a script by its digest (loaded once per process); a server that does not know it (a new or
// restarted Redis) gets the script itself.
detail::RedisReply run_script(detail::Redis& r, const char* script, std::string& sha, std::vector<std::string> args) {
  if (sha.empty()) sha = r.cmd({"SCRIPT", "LOAD", script}).str();
  args.insert(args.begin(), sha);
  args.insert(args.begin(), "EVALSHA");
  try {
    return r.cmd(args);
  } catch (const Error& e) {
    if (std::string(e.what()).find("NOSCRIPT") == std::string::npos) throw;
  }
  args[0] = "EVAL";
  args[1] = script;
  return r.cmd(args);
}

// KEYS: the bundle hash. ARGV: n totals (name, amount)..., then the needs (name, amount)...
const char* kReserveBundle = R"lua(
local n = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  for i = 0, n - 1 do redis.call('HSET', KEYS[1], ARGV[2 + i * 2], ARGV[3 + i * 2]) end
end
local first = 2 + n * 2
for i = first, #ARGV, 2 do
  local amt = tonumber(ARGV[i + 1])
  if amt > 0 and tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') + 1e-9 < amt then return 0 end
end
for i = first, #ARGV, 2 do
  local amt = tonumber(ARGV[i + 1])
  if amt > 0 then redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], -amt) end
end
return 1
)lua";

const char* kReleaseBundle = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 1, #ARGV, 2 do redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
)lua";

std::string g_reserve_sha, g_release_sha, g_bundle_reserve_sha, g_bundle_release_sha;
std::mutex g_sha_mu;

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

}  // namespace

std::string total_key(const std::string& node) { return keys::resources_total(node); }
std::string avail_key(const std::string& node) { return keys::resources_free(node); }

void register_resources(detail::Redis& r, const std::string& node, const Res& total) {
  std::vector<std::string> t{"HSET", total_key(node)}, a{"HSET", avail_key(node)};
  for (auto& [k, v] : total) {
    t.push_back(k);
    t.push_back(num(v));
    a.push_back(k);
    a.push_back(num(v));
  }
  r.cmd({"DEL", total_key(node), avail_key(node)});
  if (total.empty()) return;
  r.cmd(t);
  r.cmd(a);
}

void unregister_resources(detail::Redis& r, const std::string& node) { r.cmd({"DEL", avail_key(node)}); }

namespace {

// Arguments of the reserve script after its digest; empty when nothing is asked for.
std::vector<std::string> reserve_args(const std::vector<std::pair<std::string, Res>>& items,
                                      const std::vector<std::string>& then_hset) {
  std::vector<std::string> keys;
  std::vector<std::string> argv;
  size_t n = 0;
  for (auto& [node, res] : items) {
    auto k = avail_key(node);
    auto it = std::find(keys.begin(), keys.end(), k);
    size_t idx = static_cast<size_t>(it - keys.begin()) + 1;
    if (it == keys.end()) keys.push_back(k);
    for (auto& [name, amt] : res) {
      if (amt <= 0) continue;
      argv.push_back(std::to_string(idx));
      argv.push_back(name);
      argv.push_back(num(amt));
      ++n;
    }
  }
  if (keys.empty()) return {};
  std::vector<std::string> cmd{std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.push_back(std::to_string(n));
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  cmd.insert(cmd.end(), then_hset.begin(), then_hset.end());
  return cmd;
}

std::vector<std::string> release_args(const std::vector<std::pair<std::string, Res>>& items,
                                      const std::vector<std::string>& dels) {
  std::vector<std::string> keys, argv;
  size_t n = 0, pairs = 0;
  for (auto& [node, res] : items) {
    ++pairs;
    keys.push_back(avail_key(node));
    keys.push_back(total_key(node));
    for (auto& [name, amt] : res) {
      if (amt <= 0) continue;
      argv.push_back(std::to_string(pairs));
      argv.push_back(name);
      argv.push_back(num(amt));
      ++n;
    }
  }
  if (n == 0 && dels.empty()) return {};
  std::vector<std::string> cmd{std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.push_back(std::to_string(n));
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  cmd.insert(cmd.end(), dels.begin(), dels.end());
  return cmd;
}

Problem reserve_result(const detail::RedisReply& rep) {
  auto s = rep.strings();
  if (!s.empty() && s[0] == "1") return std::nullopt;
  std::string key = s.size() > 1 ? s[1] : "?";
  // keys::resources_free(node) -> node
  constexpr auto kPrefix = keys::kResourcePrefix;
  constexpr std::string_view kSuffix = ":avail";
  if (key.rfind(kPrefix, 0) == 0 && key.size() >= kPrefix.size() + kSuffix.size())
    key = key.substr(kPrefix.size(), key.size() - kPrefix.size() - kSuffix.size());
  return key + ": " + (s.size() > 2 ? s[2] : "?");
}

std::string digest(detail::Redis& r, const char* script, std::string& global) {
  std::lock_guard<std::mutex> l(g_sha_mu);
  if (global.empty()) global = r.cmd({"SCRIPT", "LOAD", script}).str();
  return global;
}

detail::RedisReply run(detail::Redis& r, const char* script, std::string& global, const std::vector<std::string>& args) {
  std::string sha = digest(r, script, global);
  return run_script(r, script, sha, args);
}

}  // namespace

Problem reserve(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items,
                    const std::vector<std::string>& then_hset,
                    const std::vector<std::pair<std::string, Res>>& release_first,
                    const std::vector<std::string>& del_first,
                    const std::vector<std::vector<std::string>>& before) {
  auto rel = release_args(release_first, del_first);
  auto res = reserve_args(items, then_hset);
  if (before.empty() && rel.empty() && !res.empty()) return reserve_result(run(r, kReserve, g_reserve_sha, res));
  // One round trip: the commands asked for first, the release, then the reservation (or, with
  // nothing to reserve, the record alone).
  auto evalsha = [&](const char* script, std::string& sha, const std::vector<std::string>& args) {
    std::vector<std::string> c{"EVALSHA", digest(r, script, sha)};
    c.insert(c.end(), args.begin(), args.end());
    return c;
  };
  std::vector<std::vector<std::string>> cmds = before;
  std::optional<size_t> rel_at, res_at, hset_at;  // where each is in cmds, when sent
  if (!rel.empty()) {
    rel_at = cmds.size();
    cmds.push_back(evalsha(kRelease, g_release_sha, rel));
  }
  if (!res.empty()) {
    res_at = cmds.size();
    cmds.push_back(evalsha(kReserve, g_reserve_sha, res));
  } else if (then_hset.size() >= 3) {
    hset_at = cmds.size();
    std::vector<std::string> c{"HSET"};
    c.insert(c.end(), then_hset.begin(), then_hset.end());
    cmds.push_back(std::move(c));
  }
  if (cmds.empty()) return std::nullopt;
  auto reps = r.pipeline(cmds);
  for (size_t i = 0; i < before.size(); ++i)
    if (auto e = reps[i].error(); !e.empty())
      spdlog::error("Redis at {} refused {} {}: {}", r.address(), before[i][0], before[i].size() > 1 ? before[i][1] : "", e);
  // A script the server lost (a restarted Redis) runs again from its text.
  auto again = [&](size_t at, const char* script, const std::vector<std::string>& args) -> std::optional<detail::RedisReply> {
    auto e = reps[at].error();
    if (e.empty()) return std::nullopt;
    if (e.find("NOSCRIPT") == std::string::npos) throw Error("Redis at " + r.address() + ": " + e);
    std::vector<std::string> c{"EVAL", script};
    c.insert(c.end(), args.begin(), args.end());
    return r.cmd(c);
  };
  if (rel_at) again(*rel_at, kRelease, rel);
  if (hset_at)
    if (auto e = reps[*hset_at].error(); !e.empty()) throw Error("Redis at " + r.address() + ": " + e);
  if (!res_at) return std::nullopt;
  if (auto redone = again(*res_at, kReserve, res)) return reserve_result(*redone);
  return reserve_result(reps[*res_at]);
}

void release_all(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items,
                 const std::vector<std::string>& then_del) {
  auto rel = release_args(items, then_del);
  if (!rel.empty()) run(r, kRelease, g_release_sha, rel);
}

void release(detail::Redis& r, const std::string& node, const Res& res) { release_all(r, {{node, res}}); }

std::string bundle_key(const std::string& group, int index) { return keys::bundle(group, index); }

bool reserve_bundle(detail::Redis& r, const std::string& key, const Res& bundle_total, const Res& need) {
  std::vector<std::string> args{"1", key, std::to_string(bundle_total.size())};
  for (auto& [k, v] : bundle_total) {
    args.push_back(k);
    args.push_back(num(v));
  }
  for (auto& [k, v] : need) {
    args.push_back(k);
    args.push_back(num(v));
  }
  return run(r, kReserveBundle, g_bundle_reserve_sha, args).integer() == 1;
}

void release_bundle(detail::Redis& r, const std::string& key, const Res& res) {
  std::vector<std::string> args{"1", key};
  for (auto& [k, v] : res) {
    if (v <= 0) continue;
    args.push_back(k);
    args.push_back(num(v));
  }
  if (args.size() > 2) run(r, kReleaseBundle, g_bundle_release_sha, args);
}

Res read_res(detail::Redis& r, const std::string& key) {
  Res out;
  for (auto& [k, v] : r.hgetall(key)) {
    try {
      out[k] = std::stod(v);
    } catch (...) {
    }
  }
  return out;
}

}  // namespace yard::sched
