// What leaves an IoLoop: requests and replies queued from any thread, sent at the end of the
// loop's turn, several to one peer as one batch.
#include <algorithm>

#include <spdlog/spdlog.h>

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
  size_t bytes = m.flat_bytes();
  Peer* p = enlist(peer_addr, id, bytes, cb, timeout, landing);
  if (!p) return;
  mark_dirty(*p, peer_addr);
  queue_message(*p, m);
}

void IoLoop::request_group(const std::string& peer_addr, OutMessage& m,
                           std::vector<std::pair<uint64_t, ReplyCallback>> calls, std::chrono::milliseconds timeout) {
  if (in_loop() && m.one_frame()) {
    Peer* p = enlist_group(peer_addr, m.flat_bytes(), calls, timeout);
    if (!p) return;
    mark_dirty(*p, peer_addr);
    return queue_message(*p, m);
  }
  // A posted closure is copyable: what it carries that is not goes in one shared record.
  struct Moved {
    Frames frames;
    std::vector<std::pair<uint64_t, ReplyCallback>> calls;
  };
  auto moved = std::make_shared<Moved>(Moved{m.finish(), std::move(calls)});
  auto send = [this, peer_addr, moved, timeout] {
    Peer* p = enlist_group(peer_addr, largest_frame(moved->frames), moved->calls, timeout);
    if (p) queue_frames(*p, peer_addr, std::move(moved->frames));
  };
  if (in_loop()) send();
  else post(send);
}

IoLoop::Peer* IoLoop::enlist_group(const std::string& peer_addr, size_t bytes,
                                   std::vector<std::pair<uint64_t, ReplyCallback>>& calls,
                                   std::chrono::milliseconds timeout) {
  Peer* p = nullptr;
  for (auto& [id, cb] : calls) {
    Landing none;
    if (Peer* got = enlist(peer_addr, id, bytes, cb, timeout, none)) p = got;  // each fails alone
  }
  return p;
}

void IoLoop::queue_frames(Peer& p, const std::string& peer_addr, Frames frames) {
  mark_dirty(p, peer_addr);
  close_batch(p);  // what was written into the batch goes first
  p.outbox.push_back(std::move(frames));
}

void IoLoop::queue_message(Peer& p, OutMessage& m) {
  if (p.batch.add(m)) return;
  close_batch(p);  // full: the message starts the next one
  if (!p.batch.add(m)) p.outbox.push_back(m.finish());  // larger than a batch holds: alone
}

size_t IoLoop::batch_cap() {
  static const size_t cap = std::min(kBatchMaxBytes, static_cast<size_t>(link_limits().max_message_bytes));
  return cap;
}

void IoLoop::close_batch(Peer& p) {
  if (p.batch.empty()) return;
  Frames f;
  f.push_back(p.batch.take());
  p.outbox.push_back(std::move(f));
}

void IoLoop::enqueue_request(const std::string& peer_addr, uint64_t id, Frames frames, ReplyCallback cb,
                             std::chrono::milliseconds timeout, Landing landing) {
  Peer* p = enlist(peer_addr, id, largest_frame(frames), cb, timeout, landing);
  if (p) queue_frames(*p, peer_addr, std::move(frames));
}

size_t IoLoop::largest_frame(const Frames& frames) {
  size_t largest = 0;
  for (auto& f : frames) largest = std::max(largest, f.size());
  return largest;
}

IoLoop::Peer* IoLoop::enlist(const std::string& peer_addr, uint64_t id, size_t bytes, ReplyCallback& cb,
                             std::chrono::milliseconds timeout, Landing& landing) {
  // A link with nothing in flight is not polled: what its monitor said meanwhile (it was lost,
  // say) is heard now, before it carries a request (a lost one is made again).
  // A run of requests to one busy peer finds it without a lookup.
  Peer* p = last_peer_ && last_peer_->inflight > 0 && last_peer_addr_ == peer_addr ? last_peer_ : nullptr;
  if (!p) {
    auto known = peers_.find(peer_addr);
    if (known != peers_.end() && known->second.inflight == 0) {
      if (known->second.dealer)
        on_monitor_readable(peer_addr, known->second);
      else
        on_shared_monitor(shared_for(known->second), true);
    } else if (known != peers_.end()) {
      p = &known->second;
    }
    try {
      if (!p) p = &peer(peer_addr);  // found again: what the monitor said may have closed it
    } catch (const zmq::error_t& e) {
      fail(cb, LocalError{wire::ErrorCode::UNAVAILABLE, "cannot connect to " + peer_addr + ": " + e.what()});
      return nullptr;
    }
    last_peer_addr_ = peer_addr;
    last_peer_ = p;
  }
  auto deadline = timeout.count() <= 0 || timeout == std::chrono::milliseconds::max() ? Clock::time_point::max()
                                                                                      : Clock::now() + timeout;
  if (auto too_big = oversized(bytes, peer_addr)) {
    fail(cb, LocalError{wire::ErrorCode::BAD_REQUEST, *too_big});
    return nullptr;
  }
  if (spare_pending_.empty()) {
    pending_.emplace(id, Pending{peer_addr, p, std::move(cb), deadline, std::move(landing)});
  } else {
    auto node = std::move(spare_pending_.back());
    spare_pending_.pop_back();
    node.key() = id;
    auto& pd = node.mapped();
    pd.peer = peer_addr;
    pd.link = p;
    pd.cb = std::move(cb);
    pd.deadline = deadline;
    pd.landing = std::move(landing);
    pending_.insert(std::move(node));
  }
  if (p->inflight++ == 0) {
    active_.insert(peer_addr);
    p->last_used = Clock::now();
    p->heard = p->last_used;  // an idle link owed nothing: its silence counts from now
  }
  return p;
}

void IoLoop::mark_dirty(Peer& p, const std::string& peer_addr) {
  if (!p.queued()) dirty_peers_.push_back(peer_addr);
}

void IoLoop::reply(std::string routing_id, Frames frames) {
  if (in_loop()) return queue_reply(std::move(routing_id), std::move(frames));
  hand_over_reply(std::move(routing_id), std::move(frames), false);
}

void IoLoop::reply_soon(std::string routing_id, Frames frames) {
  if (in_loop()) return queue_reply(std::move(routing_id), std::move(frames));
  hand_over_reply(std::move(routing_id), std::move(frames), true);
}

// A reply from another thread (an executor), queued without a closure. The loop is woken unless
// a wake is on its way, or (`soon`) replies are being held: then the hold's end takes it.
void IoLoop::hand_over_reply(std::string routing_id, Frames frames, bool soon) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = !wake_pending_ && !(soon && holding_replies_);
    wake_pending_ = wake_pending_ || wake;
    holding_replies_ = holding_replies_ || soon;
    posted_replies_.emplace_back(std::move(routing_id), std::move(frames));
  }
  if (wake) wake_loop();
}

Frames IoLoop::within_limit(Frames frames, const std::string& token) {
  auto too_big = oversized(frames, "a requester");
  if (!too_big) return frames;
  spdlog::error("{}", *too_big);
  uint64_t request_id = 0;
  try {
    Frames head;
    head.emplace_back(frames.front().data(), frames.front().size());
    request_id = InMessage(std::move(head)).env().getRequestId();
  } catch (const std::exception&) {
  }
  OutMessage out(token, request_id, true);
  set_error(out.env(), wire::ErrorCode::BAD_REQUEST, *too_big);
  return out.finish();
}

void IoLoop::queue_reply(std::string routing_id, Frames frames) {
  router_out_.emplace_back(std::move(routing_id), within_limit(std::move(frames), token_));
}

void IoLoop::send_batched(zmq::socket_t& s, const std::string* routing, std::vector<Frames>& msgs, LinkSeal* seal,
                          SealedAs as) {
  size_t cap = batch_cap();
  // (A batch written by a BatchWriter goes as it is.)
  auto batchable = [&](const Frames& f) {
    return f.size() == 1 && f[0].size() % 8 == 0 && f[0].size() + 16 <= cap && !is_batch(f[0]);
  };
  auto send = [&](Frames& fr) {
    if (seal) seal->seal(fr, as);
    if (routing) s.send(zmq::buffer(*routing), zmq::send_flags::sndmore);
    for (size_t k = 0; k < fr.size(); ++k)
      s.send(fr[k], k + 1 < fr.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  for (size_t i = 0; i < msgs.size();) {
    size_t j = i, bytes = 8;
    while (j < msgs.size() && batchable(msgs[j]) && bytes + 8 + msgs[j][0].size() <= cap) bytes += 8 + msgs[j++][0].size();
    if (j - i <= 1) {  // alone: not batchable, or nothing to batch it with
      send(msgs[i++]);
      continue;
    }
    Frames batch;
    batch.push_back(pack_batch(msgs, i, j));
    send(batch);
    i = j;
  }
  msgs.clear();
}

void IoLoop::flush() {
  for (auto& addr : dirty_peers_) {
    auto it = peers_.find(addr);
    if (it == peers_.end()) continue;
    auto& p = it->second;
    close_batch(p);
    if (p.dealer)
      send_batched(*p.dealer, nullptr, p.outbox, p.seal.get());
    else
      send_batched(*shared_for(p).router, &p.rid, p.outbox);
  }
  dirty_peers_.clear();
  if (router_out_.empty()) return;
  // Replies grouped by requester, each group in the order made.
  std::vector<std::pair<std::string, std::vector<Frames>>> groups;
  std::unordered_map<std::string, size_t> at;
  size_t last = 0;
  for (auto& [rid, fr] : router_out_) {
    // Most replies of a turn go to the requester of the one before.
    if (groups.empty() || groups[last].first != rid) {
      auto [it, fresh] = at.emplace(rid, groups.size());
      if (fresh) groups.emplace_back(rid, std::vector<Frames>{});
      last = it->second;
    }
    groups[last].second.push_back(std::move(fr));
  }
  router_out_.clear();
  for (auto& [rid, msgs] : groups) {
    if (!via_data_link(rid)) {
      send_batched(*router_, &rid, msgs);
    } else if (data_router_) {
      std::string data_rid = rid.substr(1);
      send_batched(*data_router_, &data_rid, msgs, data_seal_.get(), SealedAs::reply);
    }
  }
}

}  // namespace yard::detail
