#include "blocking_client.h"

#include "yard/errors.h"

namespace yard::sched {

BlockingClient::BlockingClient(std::string address, std::string token) : address_(std::move(address)) {
  io_ = std::make_unique<detail::IoLoop>("127.0.0.1", 0, std::move(token), [](detail::IoLoop::Incoming) {});
}

std::unique_ptr<detail::InMessage> BlockingClient::call(
    const std::function<void(wire::Envelope::Builder)>& fill, std::chrono::milliseconds timeout) {
  uint64_t rid = io_->next_request_id();
  detail::OutMessage m(io_->token(), rid, false);
  fill(m.env());
  std::unique_ptr<detail::InMessage> r;
  try {
    r = io_->call(address_, m, rid, timeout);
  } catch (const TimeoutError&) {
    throw ConnectionError("no answer from a Switchyard head at " + address_ + " within " +
                          std::to_string(timeout.count() / 1000) + " s");
  }
  auto body = r->env().getBody();
  if (body.isError()) {
    auto e = body.getError();
    if (e.getCode() == wire::ErrorCode::UNAUTHENTICATED)
      throw AuthError("the cluster at " + address_ + " rejected the request: " + e.getMessage().cStr());
    if (e.getCode() == wire::ErrorCode::NOT_FOUND) throw NotFoundError(e.getMessage().cStr());
    throw Error(detail::describe(e));
  }
  return r;
}

}  // namespace yard::sched
