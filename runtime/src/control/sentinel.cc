// A control store replicated under Redis Sentinel: where its primary is now. The Sentinels are
// asked in turn; the server one names is believed only when it says (ROLE) that it is the
// primary, since a Sentinel may still name a primary that has just failed or been demoted.
#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>

#include <hiredis/hiredis.h>

#include "redis_conn.h"
#include "yard/errors.h"
#include "yard/process.h"

namespace yard::sys {

namespace {

// "host:port" with a port in 1..65535, or nullopt.
std::optional<std::pair<std::string, int>> host_port(std::string_view s) {
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  int port = 0;
  auto digits = s.substr(colon + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || port <= 0 || port > 65535) return std::nullopt;
  return std::pair{std::string(s.substr(0, colon)), port};
}

// One reply, freed; its array's strings (empty for any other reply or a lost connection).
std::vector<std::string> strings_of(redisReply* r) {
  std::vector<std::string> out;
  if (r && r->type == REDIS_REPLY_ARRAY)
    for (size_t i = 0; i < r->elements; ++i)
      if (auto* e = r->element[i]; e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS)
        out.emplace_back(e->str, e->len);
  if (r) freeReplyObject(r);
  return out;
}

// True when the command was answered with anything but an error.
bool answered(redisReply* r) {
  bool ok = r && r->type != REDIS_REPLY_ERROR;
  if (r) freeReplyObject(r);
  return ok;
}

// The Sentinels this Sentinel knows of for `name`, added to `at` (the list only grows: a
// Sentinel that is away now may answer later).
void learn_sentinels(RedisConn& s, RedisEndpoint& at) {
  auto* r = s.command({"SENTINEL", "SENTINELS", at.primary_name});
  if (r && r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) {
      auto* e = r->element[i];
      if (e->type != REDIS_REPLY_ARRAY) continue;
      std::string ip, port;
      for (size_t k = 0; k + 1 < e->elements; k += 2) {
        std::string key(e->element[k]->str ? e->element[k]->str : "", e->element[k]->len);
        std::string value(e->element[k + 1]->str ? e->element[k + 1]->str : "", e->element[k + 1]->len);
        if (key == "ip") ip = value;
        if (key == "port") port = value;
      }
      auto hp = host_port(ip + ":" + port);
      if (hp && std::find(at.sentinels.begin(), at.sentinels.end(), *hp) == at.sentinels.end())
        at.sentinels.push_back(*hp);
    }
  }
  if (r) freeReplyObject(r);
}

// The primary's address as this Sentinel names it, or "" (and why).
std::string ask_sentinel(const std::pair<std::string, int>& s, RedisEndpoint& at, const std::string& password,
                         std::chrono::milliseconds timeout, std::string& why) {
  try {
    auto c = plain_conn(s.first, s.second, timeout);
    if (!password.empty() && !answered(c->command({"AUTH", password}))) {
      why = "Sentinel " + s.first + ":" + std::to_string(s.second) + " refused the password";
      return {};
    }
    auto addr = strings_of(c->command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", at.primary_name}));
    if (addr.size() != 2) {
      why = "Sentinel " + s.first + ":" + std::to_string(s.second) + " does not know " + at.primary_name;
      return {};
    }
    learn_sentinels(*c, at);
    return addr[0] + ":" + addr[1];
  } catch (const ConnectionError& e) {
    why = "Sentinel " + s.first + ":" + std::to_string(s.second) + ": " + e.what();
    return {};
  }
}

// A connection to `address` when it is a primary that accepts the password; nullptr (and why).
std::unique_ptr<RedisConn> open_primary(const std::string& address, const std::string& password,
                                        std::chrono::milliseconds timeout, std::string& why) {
  auto hp = host_port(address);
  if (!hp) return why = "a Sentinel named a malformed address " + address, nullptr;
  try {
    auto c = plain_conn(hp->first, hp->second, timeout);
    if (!password.empty() && !answered(c->command({"AUTH", password})))
      return why = "the primary at " + address + " refused the password", nullptr;
    auto role = strings_of(c->command({"ROLE"}));
    if (role.empty() || role[0] != "master")
      return why = address + " is not the primary (ROLE " + (role.empty() ? "unanswered" : role[0]) + ")", nullptr;
    return c;
  } catch (const ConnectionError& e) {
    return why = "the primary at " + address + ": " + e.what(), nullptr;
  }
}

}  // namespace

RedisEndpoint RedisEndpoint::parse(const std::string& address) {
  RedisEndpoint ep;
  constexpr std::string_view kPrefix = "sentinel:";
  if (address.rfind(kPrefix, 0) != 0) {
    auto [host, port] = split_address(address);
    ep.host = host;
    ep.port = port;
    return ep;
  }
  std::string_view rest(address);
  rest.remove_prefix(kPrefix.size());
  auto slash = rest.rfind('/');
  if (slash == std::string_view::npos || slash + 1 == rest.size())
    throw Error("the control store address '" + address + "' names no primary (sentinel:HOST:PORT,.../NAME)");
  ep.primary_name = std::string(rest.substr(slash + 1));
  auto list = rest.substr(0, slash);
  while (!list.empty()) {
    auto comma = list.find(',');
    auto one = list.substr(0, comma);
    auto hp = host_port(one);
    if (!hp) throw Error("the control store address '" + address + "' has a malformed Sentinel '" + std::string(one) + "'");
    ep.sentinels.push_back(*hp);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  if (ep.sentinels.empty()) throw Error("the control store address '" + address + "' names no Sentinel");
  return ep;
}

std::string RedisEndpoint::str() const {
  if (!via_sentinel()) return host + ":" + std::to_string(port);
  std::string out = "sentinel:";
  for (size_t i = 0; i < sentinels.size(); ++i)
    out += (i ? "," : "") + sentinels[i].first + ":" + std::to_string(sentinels[i].second);
  return out + "/" + primary_name;
}

std::pair<std::unique_ptr<RedisConn>, std::string> connect_primary(RedisEndpoint& at, const std::string& password,
                                                                   std::chrono::milliseconds timeout,
                                                                   std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  auto per_try = std::min(timeout, std::chrono::milliseconds(1000));
  std::string why;
  for (;;) {
    // Index, not iterator: a Sentinel's answer may add to the list.
    for (size_t i = 0; i < at.sentinels.size(); ++i) {
      std::string address = ask_sentinel(at.sentinels[i], at, password, per_try, why);
      if (address.empty()) continue;
      if (auto c = open_primary(address, password, per_try, why)) {
        c->set_timeout(timeout);  // found quickly; its commands get the caller's time
        return {std::move(c), address};
      }
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw ConnectionError("no primary of " + at.primary_name + " through its Sentinels (" + at.str() + ") within " +
                            std::to_string((wait.count() + 999) / 1000) + " s: " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace yard::sys
