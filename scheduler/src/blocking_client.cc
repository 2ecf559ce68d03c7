#include "blocking_client.h"

#include "yard/internal/session.h"
#include "yard/errors.h"

namespace yard::sched {

BlockingClient::BlockingClient(std::string address, std::string token)
    : addresses_(detail::address_list(address)), address_(addresses_.empty() ? address : addresses_.front()) {
  io_ = std::make_unique<detail::IoLoop>("127.0.0.1", 0, std::move(token), [](detail::IoLoop::Incoming) {});
}

std::unique_ptr<detail::InMessage> BlockingClient::call(
    const std::function<void(wire::Envelope::Builder)>& fill, std::chrono::milliseconds timeout) {
  if (addresses_.size() <= 1) return call_one(address_, fill, timeout);
  // A head and its standbys: the one that answered last first, then the others in turn. A
  // standby acts on nothing (it answers "unavailable"), so asking the next one is safe.
  size_t n = addresses_.size();
  auto each = std::min(timeout, std::chrono::milliseconds(5000));
  for (size_t k = 0;; ++k) {
    const std::string& at = addresses_[(current_ + k) % n];
    try {
      auto r = call_one(at, fill, k + 1 == n ? timeout : each);
      current_ = (current_ + k) % n;
      address_ = at;
      return r;
    } catch (const Unavailable&) {
      if (k + 1 == n) throw;
    } catch (const ConnectionError&) {
      if (k + 1 == n) throw;
    }
  }
}

std::unique_ptr<detail::InMessage> BlockingClient::call_one(
    const std::string& at, const std::function<void(wire::Envelope::Builder)>& fill, std::chrono::milliseconds timeout) {
  uint64_t rid = io_->next_request_id();
  detail::OutMessage m(io_->token(), rid, false);
  fill(m.env());
  std::unique_ptr<detail::InMessage> r;
  try {
    r = io_->call(at, m, rid, timeout);
  } catch (const TimeoutError&) {
    throw ConnectionError("no answer from a Switchyard head at " + at + " within " +
                          std::to_string(timeout.count() / 1000) + " s");
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    if (e.getCode() == wire::ErrorCode::UNAUTHENTICATED)
      throw AuthError("the cluster at " + at + " rejected the request: " + e.getMessage().cStr());
    if (e.getCode() == wire::ErrorCode::NOT_FOUND) throw NotFoundError(e.getMessage().cStr());
    if (e.getCode() == wire::ErrorCode::UNAVAILABLE) throw Unavailable(at + ": " + detail::describe(e));
    throw Error(detail::describe(e));
  }
  return r;
}

}  // namespace yard::sched
