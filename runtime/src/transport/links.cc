// Finding and keeping the I/O loop's links (links.h): the link of each request, its outbox and
// batches, idle links closed, silent peers found.
#include "links.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::detail {

void Peer::close_batch() {
  if (batch.empty()) return;
  Frames f;
  f.push_back(batch.take());
  outbox.push_back(std::move(f));
}

void Peer::queue_message(OutMessage& m) {
  if (batch.add(m)) return;
  close_batch();  // full: the message starts the next one
  if (!batch.add(m)) outbox.push_back(m.finish());  // larger than a batch holds: alone
}

void Peer::queue_frames(Frames frames) {
  close_batch();  // what was written into the batch goes first
  outbox.push_back(std::move(frames));
}

void FaultLog::note(const std::string& peer, const std::string& what) {
  count_.fetch_add(1);
  auto line = faults_.note(peer, what, Clock::now());
  if (line) spdlog::warn("{}", *line);
}

Links::Links(zmq::context_t& ctx, std::string inproc, CurveIdentity& identity, const ConnectionCount& accepted,
             FaultLog& faults, LinkOwner& owner)
    : ctx_(ctx), inproc_(std::move(inproc)), identity_(identity), accepted_(accepted), faults_(faults), owner_(owner) {}

std::chrono::milliseconds Links::idle_sweep() const {
  return std::min<std::chrono::milliseconds>(kIdleSweep, std::chrono::milliseconds(idle_link_ms_.load()));
}

Peer& Links::for_request(const std::string& addr) {
  // A run of requests to one busy peer finds it without a lookup.
  if (last_ && last_->inflight > 0 && last_addr_ == addr) return *last_;
  Peer* p = nullptr;
  auto known = peers_.find(addr);
  if (known != peers_.end() && known->second.inflight == 0) {
    if (known->second.dealer)
      on_own_monitor(addr, known->second);
    else
      on_shared_monitor(shared_for(known->second), true);
  } else if (known != peers_.end()) {
    p = &known->second;
  }
  if (!p) {  // found again: what the monitor said may have closed it
    auto again = peers_.find(addr);
    p = again != peers_.end() ? &again->second : &make(addr);
  }
  last_addr_ = addr;
  last_ = p;
  return *p;
}

void Links::begin(Peer& p, const std::string& addr) {
  if (p.inflight++ == 0) {
    active_.insert(addr);
    p.last_used = Clock::now();
    p.heard = p.last_used;  // an idle link owed nothing: its silence counts from now
  }
}

void Links::settle(Peer* p, const std::string& addr) {
  if (p->inflight > 0 && --p->inflight == 0) {
    active_.erase(addr);
    p->last_used = Clock::now();  // idle from now
  }
}

void Links::queue_message(Peer& p, const std::string& addr, OutMessage& m) {
  if (!p.queued()) dirty_.push_back(addr);
  p.queue_message(m);
}

void Links::queue_frames(Peer& p, const std::string& addr, Frames frames) {
  if (!p.queued()) dirty_.push_back(addr);
  p.queue_frames(std::move(frames));
}

void Links::flush() {
  for (auto& addr : dirty_) {
    auto it = peers_.find(addr);
    if (it == peers_.end()) continue;
    auto& p = it->second;
    p.close_batch();
    if (p.dealer)
      send_batched(*p.dealer, nullptr, p.outbox, p.seal.get());
    else
      send_batched(*shared_for(p).router(), &p.rid, p.outbox);
  }
  dirty_.clear();
}

LinkPoll Links::add_items(std::vector<zmq::pollitem_t>& items) {
  LinkPoll poll;
  poll.own_at = items.size();
  for (auto& addr : active_) {
    auto& p = peers_.at(addr);
    if (!p.dealer) continue;  // a shared link: its ROUTER is polled below
    poll.own.push_back(addr);
    items.push_back({p.dealer->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({p.monitor->handle(), 0, ZMQ_POLLIN, 0});
  }
  poll.shared_at = items.size();
  for (int k = 0; k < 2; ++k)
    if (shared_[k].router()) {
      poll.shared[k] = true;
      items.push_back({shared_[k].router()->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({shared_[k].monitor()->handle(), 0, ZMQ_POLLIN, 0});
    }
  return poll;
}

void Links::on_ready(const std::vector<zmq::pollitem_t>& items, const LinkPoll& poll) {
  for (size_t i = poll.shared_at, k = 0; k < 2; ++k) {
    if (!poll.shared[k]) continue;
    if (items[i].revents & ZMQ_POLLIN) on_shared_readable(shared_[k]);
    if ((items[i + 1].revents & ZMQ_POLLIN) || !held_events_.empty()) on_shared_monitor(shared_[k]);
    i += 2;
  }
  for (size_t i = 0; i < poll.own.size(); ++i) {
    const auto& addr = poll.own[i];
    size_t at = poll.own_at + 2 * i;  // its DEALER, then its monitor
    auto it = peers_.find(addr);
    if (it == peers_.end()) continue;
    if (items[at].revents & ZMQ_POLLIN) on_dealer_readable(addr, it->second);
    it = peers_.find(addr);
    if (it == peers_.end()) continue;
    if (items[at + 1].revents & ZMQ_POLLIN) on_own_monitor(addr, it->second);
  }
}

void Links::remove(const std::string& addr) {
  auto it = peers_.find(addr);
  if (it != peers_.end()) {
    unlink(addr, it->second);
    if (last_ == &it->second) last_ = nullptr;
    peers_.erase(it);
  }
  sealed_links_.erase(addr);
  active_.erase(addr);
}

void Links::close_idle(Clock::time_point now) {
  if (now < next_idle_sweep_) return;
  next_idle_sweep_ = now + idle_sweep();
  auto idle = std::chrono::milliseconds(idle_link_ms_.load());
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto& p = it->second;
    if (p.inflight == 0 && !p.queued() && now - p.last_used > idle)
      it = close_link(it);
    else
      ++it;
  }
}

void Links::close_least_used() {
  std::vector<std::pair<Clock::time_point, std::string>> idle;
  for (auto& [addr, p] : peers_)
    if (p.inflight == 0 && !p.queued()) idle.emplace_back(p.last_used, addr);
  size_t n = std::min(idle.size(), std::max<size_t>(1, peers_.size() / 4));
  std::nth_element(idle.begin(), idle.begin() + static_cast<long>(n), idle.end());
  for (size_t i = 0; i < n; ++i) close_link(peers_.find(idle[i].second));
}

Links::PeerMap::iterator Links::close_link(PeerMap::iterator it) {
  unlink(it->first, it->second);
  sealed_links_.erase(it->first);
  if (last_ == &it->second) last_ = nullptr;
  return peers_.erase(it);
}

// A peer that owes replies and has said nothing for a second (or a quarter of the silence limit)
// is sent a PING, which its I/O loop answers between requests; one silent for the limit is taken
// for gone (a frozen process or host, a cut network). (ZeroMQ's ZMTP heartbeats would cost every
// link a timer in libzmq's I/O thread, cancelled by a linear search: a head or driver linked to
// 10,000 nodes spent its cores on them.) The default limit leaves room for a loop busy with one
// long turn, such as a new head rebuilding 100,000 actors from Redis (about 12 s here).
Links::Silent Links::silent(Clock::time_point now) {
  Silent out;
  if (now < next_probe_scan_) return out;
  next_probe_scan_ = now + std::chrono::milliseconds(250);
  const auto limit = silence_limit();
  for (auto& addr : active_) {
    auto it = peers_.find(addr);
    if (it == peers_.end() || it->second.seal) continue;  // data links keep ZMTP heartbeats
    auto quiet = now - it->second.heard;
    if (quiet >= limit) {
      out.gone.push_back(addr);
    } else if (quiet >= std::min<Clock::duration>(std::chrono::seconds(1), limit / 4) && !it->second.probing) {
      it->second.probing = true;
      out.ask.push_back(addr);
    }
  }
  return out;
}

void Links::probe_answered(const std::string& addr) {
  if (auto it = peers_.find(addr); it != peers_.end()) it->second.probing = false;
}

std::string Links::sealed_peer(const DataLink& link) {
  // Tagged with a digest of the key (the name shows in logs; the key must not).
  std::string tag = sys::sha256_hex(link.key.data(), link.key.size()).substr(0, 8);
  std::string name = "sealed:" + link.address + "#" + tag;
  sealed_links_[name] = link;
  return name;
}

}  // namespace yard::detail
