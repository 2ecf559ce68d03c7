// What leaves an IoLoop: requests and replies made on any thread, queued for the end of the
// loop's turn.
#include "io_loop.h"

namespace yard::detail {

void IoLoop::request(const std::string& peer_addr, uint64_t id, Frames frames, ReplyCallback cb,
                     std::chrono::milliseconds timeout, Landing landing) {
  // On the loop thread the request is queued now, so requests leave in the order they are made.
  if (in_loop()) return enqueue_request(peer_addr, id, std::move(frames), std::move(cb), timeout, std::move(landing));
  // A posted closure is copyable: what it carries that is not goes in one shared record.
  struct Moved {
    Frames frames;
    ReplyCallback cb;
  };
  auto moved = std::make_shared<Moved>(Moved{std::move(frames), std::move(cb)});
  post([this, peer_addr, id, moved, timeout, landing = std::move(landing)]() mutable {
    enqueue_request(peer_addr, id, std::move(moved->frames), std::move(moved->cb), timeout, std::move(landing));
  });
}

void IoLoop::request(const std::string& peer_addr, uint64_t id, OutMessage& m, ReplyCallback cb,
                     std::chrono::milliseconds timeout, Landing landing) {
  if (!in_loop() || !m.one_frame())
    return request(peer_addr, id, m.finish(), std::move(cb), timeout, std::move(landing));
  if (Peer* p = requests_.enlist(peer_addr, id, m.flat_bytes(), cb, timeout, landing))
    links_.queue_message(*p, peer_addr, m);
}

void IoLoop::request_group(const std::string& peer_addr, OutMessage& m,
                           std::vector<std::pair<uint64_t, ReplyCallback>> calls, std::chrono::milliseconds timeout) {
  if (in_loop() && m.one_frame()) {
    if (Peer* p = requests_.enlist_group(peer_addr, m.flat_bytes(), calls, timeout))
      links_.queue_message(*p, peer_addr, m);
    return;
  }
  // A posted closure is copyable: what it carries that is not goes in one shared record.
  struct Moved {
    Frames frames;
    std::vector<std::pair<uint64_t, ReplyCallback>> calls;
  };
  auto moved = std::make_shared<Moved>(Moved{m.finish(), std::move(calls)});
  auto send = [this, peer_addr, moved, timeout] {
    Peer* p = requests_.enlist_group(peer_addr, largest_frame(moved->frames), moved->calls, timeout);
    if (p) links_.queue_frames(*p, peer_addr, std::move(moved->frames));
  };
  if (in_loop())
    send();
  else
    post(send);
}

void IoLoop::enqueue_request(const std::string& peer_addr, uint64_t id, Frames frames, ReplyCallback cb,
                             std::chrono::milliseconds timeout, Landing landing) {
  if (Peer* p = requests_.enlist(peer_addr, id, largest_frame(frames), cb, timeout, landing))
    links_.queue_frames(*p, peer_addr, std::move(frames));
}

void IoLoop::reply(std::string routing_id, Frames frames) {
  if (in_loop()) return listener_.queue_reply(std::move(routing_id), std::move(frames));
  post_box_.hand_over_reply(std::move(routing_id), std::move(frames), false);
}

void IoLoop::reply_soon(std::string routing_id, Frames frames) {
  if (in_loop()) return listener_.queue_reply(std::move(routing_id), std::move(frames));
  post_box_.hand_over_reply(std::move(routing_id), std::move(frames), true);
}

}  // namespace yard::detail
