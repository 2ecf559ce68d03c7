// The I/O loop's replies (io_loop.h): read, authenticated, matched with their requests, and handed
// to the requests' callbacks; a group of replies (taskReplies) reply by reply.
#include "io_loop.h"

#include <spdlog/spdlog.h>

namespace yard::detail {

void IoLoop::deliver(ReplyCallback& cb, std::unique_ptr<InMessage> msg, std::optional<LocalError> err) {
  try {
    cb(std::move(msg), std::move(err));
  } catch (const std::exception& e) {
    spdlog::error("a reply handler failed: {}", e.what());
  } catch (const kj::Exception& e) {
    spdlog::error("a reply handler failed: {}", e.getDescription().cStr());
  }
}

void IoLoop::take_replies(const std::string& addr, Frames frames) {
  std::vector<Received> msgs;
  try {
    msgs = received_of(frames);
  } catch (const DecodeError& e) {
    fault(addr, std::string("dropped a malformed batch of replies: ") + e.what());
    return;
  }
  for (auto& r : msgs) take_reply(addr, std::move(r));
}

void IoLoop::take_reply(const std::string& addr, Received received) {
  std::unique_ptr<InMessage> msg;
  try {
    msg = std::move(received).open();
  } catch (const DecodeError& e) {
    fault(addr, std::string("dropped a malformed reply: ") + e.what());
    return;
  }
  auto body = msg->env().getBody();
  // A reply is authenticated as a request is. One without the token is taken only as the
  // peer's refusal of ours (it cannot deliver a value); any other is dropped.
  if (msg->token() != token_) {
    bool refusal = msg->token().size() == 0 && body.isError() &&
                   (body.getError().getCode() == wire::ErrorCode::UNAUTHENTICATED ||
                    body.getError().getCode() == wire::ErrorCode::BAD_REQUEST);
    if (!refusal) {
      fault(addr, "dropped a reply without the cluster token");
      return;
    }
  }
  if (body.isTaskReplies()) return take_group(addr, std::move(msg));
  auto it = pending_.find(msg->env().getRequestId());
  if (it == pending_.end()) return;  // late reply after a deadline
  auto cb = answered(it);
  deliver(cb, std::move(msg), std::nullopt);
}

IoLoop::ReplyCallback IoLoop::answered(std::unordered_map<uint64_t, Pending>::iterator it) {
  auto node = pending_.extract(it);
  auto cb = std::move(node.mapped().cb);
  settle(node.mapped());
  if (spare_pending_.size() < kSparePending) {  // its node is kept for a later request
    node.mapped().landing = {};
    spare_pending_.push_back(std::move(node));
  }
  return cb;
}

// Each reply of the group goes to its request's callback as a message of its own, which keeps the
// group's bytes. A reply is taken only from the peer its request went to.
void IoLoop::take_group(const std::string& addr, std::unique_ptr<InMessage> msg) {
  std::shared_ptr<const InMessage> group = std::move(msg);
  capnp::List<wire::GroupedReply>::Reader list;
  try {
    list = group->env().getBody().getTaskReplies();  // read once: each reading counts toward its limit
  } catch (const kj::Exception& e) {
    fault(addr, std::string("dropped a malformed group of replies: ") + e.getDescription().cStr());
    return;
  }
  for (unsigned i = 0; i < list.size(); ++i) {
    std::unique_ptr<InMessage> reply;
    uint64_t id = 0;
    try {
      auto env = list[i].getEnvelope();
      id = env.getRequestId();
      if (!env.getIsReply() || env.getBody().isTaskReplies()) {
        fault(addr, "dropped a group's reply that is not a reply");
        continue;
      }
      reply = std::make_unique<InMessage>(group, env);
    } catch (const kj::Exception& e) {
      fault(addr, std::string("dropped a malformed reply of a group: ") + e.getDescription().cStr());
      continue;
    }
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // late reply after a deadline
    if (it->second.peer != addr) {
      fault(addr, "dropped a reply to a request sent elsewhere");
      continue;
    }
    auto cb = answered(it);
    deliver(cb, std::move(reply), std::nullopt);
  }
}

}  // namespace yard::detail
