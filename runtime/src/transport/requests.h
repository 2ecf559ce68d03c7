// The requests a loop has sent and awaits: each with its callback, its deadline and its link.
// Replies are matched to them by request id; a request fails locally (never hangs) when its
// deadline passes or when the connection to its peer is lost or refused: that is how a crashed
// worker or a wrong address is noticed. A refused connection (nothing delivered) fails with
// UNAVAILABLE, a lost one with WORKER_CRASHED. Loop thread only, except where a member says
// otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "links.h"
#include "reply_callback.h"

namespace yard::detail {

// Room where the value frame of a reply may be written as it is opened, when the peer is a
// sealed one (IoLoop::sealed_peer): the reply's frame then points into it, with no copy. `keep`
// holds the room while the request is pending.
struct ReplyLanding {
  char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keep;
};

class Requests final : public LinkOwner {
 public:
  Requests(Links& links, FaultLog& faults, const std::string& token) : links_(links), faults_(faults), token_(token) {}

  // A request `id` of `bytes` (its largest frame) about to go to `addr`: its link, with the
  // request awaited from it (null, its callback failed, when the peer cannot be reached or the
  // request is over the message limit).
  Peer* enlist(const std::string& addr, uint64_t id, size_t bytes, ReplyCallback& cb,
               std::chrono::milliseconds timeout, ReplyLanding& landing);
  // enlist() for each request of a group: the link, or null when none could be sent.
  Peer* enlist_group(const std::string& addr, size_t bytes, std::vector<std::pair<uint64_t, ReplyCallback>>& calls,
                     std::chrono::milliseconds timeout);
  bool empty() const { return pending_.empty(); }
  // Fails the requests whose deadline has passed (looked for every 20 ms at most).
  void expire(Clock::time_point now);
  // The loop stops: every request still waiting fails, so no caller hangs on a stopped loop.
  void fail_all(const std::string& why);
  // Thread-safe. The process is ending: requests that fail from now on (its peers may go first)
  // are reported with LocalError::shutdown.
  void closing() { closing_ = true; }

  void on_replies(const std::string& addr, Frames frames) override;
  void on_link_failed(const std::string& addr, const std::string& why, wire::ErrorCode code) override;
  LinkSeal::Room landing(const std::string& addr, uint64_t request_id, size_t size) override;

 private:
  struct Pending {
    std::string peer;
    Peer* link;  // a link with requests in flight is never closed (on_link_failed drops them first)
    ReplyCallback cb;
    Clock::time_point deadline;
    ReplyLanding landing;
  };
  using PendingMap = std::unordered_map<uint64_t, Pending>;
  void take_reply(const std::string& addr, Received received);
  void take_group(const std::string& addr, std::unique_ptr<InMessage> group);  // taskReplies
  // A request answered: out of pending_ and settled on its link; its callback, to run.
  ReplyCallback answered(PendingMap::iterator it);
  void fail(ReplyCallback& cb, LocalError e);
  // Runs a reply callback; one that throws is logged (the loop and its process keep running).
  static void deliver(ReplyCallback& cb, std::unique_ptr<InMessage> msg, std::optional<LocalError> err);

  Links& links_;
  FaultLog& faults_;
  const std::string& token_;
  std::atomic<bool> closing_{false};
  PendingMap pending_;
  // Answered requests' map nodes, reused by the next requests (a request allocates no node).
  static constexpr size_t kSparePending = 4096;
  std::vector<PendingMap::node_type> spare_;
  Clock::time_point next_expiry_scan_{};
};

}  // namespace yard::detail
