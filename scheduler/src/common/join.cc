#include "common/join.h"

#include "yard/errors.h"
#include "yard/process.h"
#include "yard/internal/redis.h"

namespace yard::sched {

using namespace detail;

ControlStoreAccess ask_control_store(Messenger& io, const std::string& head, const std::string& token) {
  uint64_t rid = io.next_request_id();
  OutMessage m(token, rid, false);
  m.env().getBody().setGetControlStore();
  std::unique_ptr<InMessage> r;
  try {
    r = io.call(head, m, rid, std::chrono::seconds(10));
  } catch (const std::exception& e) {
    throw ConnectionError("cannot reach the head at " + head + ": " + e.what());
  }
  auto body = r->env().getBody();
  if (body.isError()) throw AuthError("the head at " + head + " refused this node: " + describe(body.getError()));
  auto cs = body.getControlStore();
  ControlStoreAccess a{{std::string(cs.getAddress()), std::string(cs.getPassword())}, std::string(cs.getWebTlsKey()),
                       std::string(cs.getWebTlsCert())};
  auto at = sys::RedisEndpoint::parse(a.address);
  auto [jh, jp] = split_address(head);
  if (!at.via_sentinel() && (at.host == "127.0.0.1" || at.host == "0.0.0.0") && jh != "127.0.0.1" && jh != "localhost")
    a.address = jh + ":" + std::to_string(at.port);
  if (std::string cert = cs.getTlsCert(); !cert.empty()) sys::trust_redis_tls(a.address, cert);
  return a;
}

}  // namespace yard::sched
