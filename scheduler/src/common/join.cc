#include "common/join.h"

#include "yard/internal/session.h"
#include "yard/errors.h"
#include "yard/process.h"
#include "yard/internal/redis.h"

namespace yard::sched {

using namespace detail;

namespace {
ControlStoreAccess ask_one(Messenger& io, const std::string& head, const std::string& token);
}

ControlStoreAccess ask_control_store(Messenger& io, const std::string& heads, const std::string& token) {
  auto list = address_list(heads);
  for (size_t k = 0;; ++k) {
    try {
      return ask_one(io, list.at(k), token);
    } catch (const ConnectionError&) {
      if (k + 1 >= list.size()) throw;
    }
  }
}

namespace {
ControlStoreAccess ask_one(Messenger& io, const std::string& head, const std::string& token) {
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
  if (body.isError() && body.getError().getCode() == wire::ErrorCode::UNAVAILABLE)
    throw ConnectionError("the head at " + head + " does not serve: " + describe(body.getError()));
  if (body.isError()) throw AuthError("the head at " + head + " refused this node: " + describe(body.getError()));
  auto cs = body.getControlStore();
  ControlStoreAccess a;
  a.address = cs.getAddress();
  a.password = cs.getPassword();
  a.web_tls_key = cs.getWebTlsKey();
  a.web_tls_cert = cs.getWebTlsCert();
  auto at = sys::RedisEndpoint::parse(a.address);
  auto [jh, jp] = split_address(head);
  if (!at.via_sentinel() && (at.host == "127.0.0.1" || at.host == "0.0.0.0") && jh != "127.0.0.1" && jh != "localhost")
    a.address = jh + ":" + std::to_string(at.port);
  a.redis_tls_cert = cs.getTlsCert();
  if (!a.redis_tls_cert.empty()) sys::trust_redis_tls(a.address, a.redis_tls_cert);
  a.head = head;
  return a;
}
}  // namespace

}  // namespace yard::sched
