#include "resources.h"

#include <algorithm>
#include <cstdio>

#include "redis_client.h"

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
return 1
)lua";

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

}  // namespace

std::string total_key(const std::string& node) { return "yard:res:" + node + ":total"; }
std::string avail_key(const std::string& node) { return "yard:res:" + node + ":avail"; }

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

std::string reserve(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items) {
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
  if (keys.empty()) return "";
  std::vector<std::string> cmd{"EVAL", kReserve, std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.push_back(std::to_string(n));
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  auto rep = r.cmd(cmd);
  if (rep.size() >= 1 && rep.strings().at(0) == "1") return "";
  auto s = rep.strings();
  std::string key = s.size() > 1 ? s[1] : "?";
  // "yard:res:<node>:avail" -> "<node>"
  if (key.rfind("yard:res:", 0) == 0) key = key.substr(9, key.size() - 9 - 6);
  return key + ": " + (s.size() > 2 ? s[2] : "?");
}

void release_all(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items) {
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
  if (n == 0) return;
  std::vector<std::string> cmd{"EVAL", kRelease, std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.push_back(std::to_string(n));
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  r.cmd(cmd);
}

void release(detail::Redis& r, const std::string& node, const Res& res) { release_all(r, {{node, res}}); }

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

bool fits(const Res& need, const Res& have) {
  for (auto& [k, v] : need) {
    if (v <= 0) continue;
    auto it = have.find(k);
    if (it == have.end() || it->second + 1e-9 < v) return false;
  }
  return true;
}

double utilisation(const Res& total, const Res& avail) {
  double u = 0;
  for (auto& [k, t] : total) {
    if (t <= 0 || k == "memory") continue;
    auto it = avail.find(k);
    double a = it == avail.end() ? 0 : it->second;
    u = std::max(u, 1.0 - a / t);
  }
  return u;
}

}  // namespace yard::sched
