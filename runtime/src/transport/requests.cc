#include "requests.h"

#include <spdlog/spdlog.h>

namespace yard::detail {

Peer* Requests::enlist(const std::string& addr, uint64_t id, size_t bytes, ReplyCallback& cb,
                       std::chrono::milliseconds timeout, ReplyLanding& landing) {
  Peer* p;
  try {
    p = &links_.for_request(addr);
  } catch (const zmq::error_t& e) {
    fail(cb, LocalError{wire::ErrorCode::UNAVAILABLE, "cannot connect to " + addr + ": " + e.what()});
    return nullptr;
  }
  auto deadline = timeout.count() <= 0 || timeout == std::chrono::milliseconds::max() ? Clock::time_point::max()
                                                                                      : Clock::now() + timeout;
  if (auto too_big = oversized(bytes, addr)) {
    fail(cb, LocalError{wire::ErrorCode::BAD_REQUEST, *too_big});
    return nullptr;
  }
  if (spare_.empty()) {
    pending_.emplace(id, Pending{addr, p, std::move(cb), deadline, std::move(landing)});
  } else {
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = id;
    auto& pd = node.mapped();
    pd.peer = addr;
    pd.link = p;
    pd.cb = std::move(cb);
    pd.deadline = deadline;
    pd.landing = std::move(landing);
    pending_.insert(std::move(node));
  }
  links_.begin(*p, addr);
  return p;
}

Peer* Requests::enlist_group(const std::string& addr, size_t bytes,
                             std::vector<std::pair<uint64_t, ReplyCallback>>& calls,
                             std::chrono::milliseconds timeout) {
  Peer* p = nullptr;
  for (auto& [id, cb] : calls) {
    ReplyLanding none;
    if (Peer* got = enlist(addr, id, bytes, cb, timeout, none)) p = got;  // each fails alone
  }
  return p;
}

void Requests::expire(Clock::time_point now) {
  if (now < next_expiry_scan_) return;
  next_expiry_scan_ = now + std::chrono::milliseconds(20);
  std::vector<std::pair<ReplyCallback, std::string>> expired;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline <= now) {
      links_.settle(it->second.link, it->second.peer);
      expired.emplace_back(std::move(it->second.cb), it->second.peer);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [cb, peer] : expired)
    fail(cb, LocalError{wire::ErrorCode::TIMEOUT, "no reply from " + peer + " before the deadline"});
}

void Requests::fail_all(const std::string& why) {
  auto pending = std::move(pending_);
  pending_.clear();
  closing_ = true;
  for (auto& [id, p] : pending) fail(p.cb, LocalError{wire::ErrorCode::UNAVAILABLE, why});
}

void Requests::on_link_failed(const std::string& addr, const std::string& why, wire::ErrorCode code) {
  std::vector<ReplyCallback> cbs;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.peer == addr) {
      cbs.push_back(std::move(it->second.cb));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  links_.remove(addr);
  for (auto& cb : cbs) fail(cb, LocalError{code, why});
}

LinkSeal::Room Requests::landing(const std::string& addr, uint64_t request_id, size_t size) {
  auto it = pending_.find(request_id);
  if (it == pending_.end() || it->second.peer != addr || !it->second.landing.data || size > it->second.landing.size)
    return {};
  return {it->second.landing.data, it->second.landing.keep};
}

void Requests::fail(ReplyCallback& cb, LocalError e) {
  e.shutdown = e.shutdown || closing_;
  deliver(cb, nullptr, std::move(e));
}

void Requests::deliver(ReplyCallback& cb, std::unique_ptr<InMessage> msg, std::optional<LocalError> err) {
  try {
    cb(std::move(msg), std::move(err));
  } catch (const std::exception& e) {
    spdlog::error("a reply handler failed: {}", e.what());
  } catch (const kj::Exception& e) {
    spdlog::error("a reply handler failed: {}", e.getDescription().cStr());
  }
}

void Requests::on_replies(const std::string& addr, Frames frames) {
  std::vector<Received> msgs;
  try {
    msgs = received_of(frames);
  } catch (const DecodeError& e) {
    faults_.note(addr, std::string("dropped a malformed batch of replies: ") + e.what());
    return;
  }
  for (auto& r : msgs) take_reply(addr, std::move(r));
}

void Requests::take_reply(const std::string& addr, Received received) {
  std::unique_ptr<InMessage> msg;
  try {
    msg = std::move(received).open();
  } catch (const DecodeError& e) {
    faults_.note(addr, std::string("dropped a malformed reply: ") + e.what());
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
      faults_.note(addr, "dropped a reply without the cluster token");
      return;
    }
  }
  if (body.isTaskReplies()) return take_group(addr, std::move(msg));
  auto it = pending_.find(msg->env().getRequestId());
  if (it == pending_.end()) return;  // late reply after a deadline
  auto cb = answered(it);
  deliver(cb, std::move(msg), std::nullopt);
}

ReplyCallback Requests::answered(PendingMap::iterator it) {
  auto node = pending_.extract(it);
  auto cb = std::move(node.mapped().cb);
  links_.settle(node.mapped().link, node.mapped().peer);
  if (spare_.size() < kSparePending) {  // its node is kept for a later request
    node.mapped().landing = {};
    spare_.push_back(std::move(node));
  }
  return cb;
}

// Each reply of the group goes to its request's callback as a message of its own, which keeps the
// group's bytes. A reply is taken only from the peer its request went to.
void Requests::take_group(const std::string& addr, std::unique_ptr<InMessage> msg) {
  std::shared_ptr<const InMessage> group = std::move(msg);
  capnp::List<wire::GroupedReply>::Reader list;
  try {
    list = group->env().getBody().getTaskReplies();  // read once: each reading counts toward its limit
  } catch (const kj::Exception& e) {
    faults_.note(addr, std::string("dropped a malformed group of replies: ") + e.getDescription().cStr());
    return;
  }
  for (unsigned i = 0; i < list.size(); ++i) {
    std::unique_ptr<InMessage> reply;
    uint64_t id = 0;
    try {
      auto env = list[i].getEnvelope();
      id = env.getRequestId();
      if (!env.getIsReply() || env.getBody().isTaskReplies()) {
        faults_.note(addr, "dropped a group's reply that is not a reply");
        continue;
      }
      reply = std::make_unique<InMessage>(group, env);
    } catch (const kj::Exception& e) {
      faults_.note(addr, std::string("dropped a malformed reply of a group: ") + e.getDescription().cStr());
      continue;
    }
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // late reply after a deadline
    if (it->second.peer != addr) {
      faults_.note(addr, "dropped a reply to a request sent elsewhere");
      continue;
    }
    auto cb = answered(it);
    deliver(cb, std::move(reply), std::nullopt);
  }
}

}  // namespace yard::detail
