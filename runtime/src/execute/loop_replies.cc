#include "execute/loop_replies.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

namespace yard::detail {

wire::Envelope::Builder GroupedReplies::group_reply(const Incoming& call) {
  if (held_.must_leave_for(call.routing_id)) send_held(true);
  return held_.add(call.routing_id, call.request_id());
}

void GroupedReplies::replied(bool more) {
  if (held_.must_leave_after(more)) send_held(more);
}

void GroupedReplies::reply(const Incoming& call, OutMessage& m, bool more) {
  send_held(more);  // the replies held go first
  // With more calls queued behind this one, its reply may join theirs (IoLoop::reply_soon).
  if (more)
    io_->reply_soon(call.routing_id, m.finish());
  else
    io_->reply(call.routing_id, m.finish());
}

void GroupedReplies::send_held(bool soon) {
  if (held_.empty()) return;
  auto [to, group] = held_.take();
  Frames frames;
  frames.push_back(std::move(group));
  if (soon)
    io_->reply_soon(std::move(to), std::move(frames));
  else
    io_->reply(std::move(to), std::move(frames));
}

wire::Envelope::Builder LoopReplies::group_reply(const Incoming&) {
  spdlog::critical("a reply was grouped on a path that groups none");
  std::abort();
}

void LoopReplies::reply(const Incoming& call, OutMessage& m, bool) { io_->reply(call.routing_id, m.finish()); }

}  // namespace yard::detail
