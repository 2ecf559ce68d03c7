#include "post_box.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace yard::detail {

PostBox::PostBox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

PostBox::~PostBox() {
  if (fd_ >= 0) close(fd_);
}

void PostBox::post(std::function<void()> fn) {
  bool wake_now;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake_now = !wake_pending_;
    wake_pending_ = true;
    posted_.work.push_back(std::move(fn));
  }
  if (wake_now) wake();
}

// A reply from another thread (an executor), queued without a closure. The loop is woken unless
// a wake is on its way, or (`soon`) replies are being held: then the hold's end takes it.
void PostBox::hand_over_reply(std::string routing_id, Frames frames, bool soon) {
  bool wake_now;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake_now = !wake_pending_ && !(soon && holding_);
    wake_pending_ = wake_pending_ || wake_now;
    holding_ = holding_ || soon;
    posted_.replies.emplace_back(std::move(routing_id), std::move(frames));
  }
  if (wake_now) wake();
}

void PostBox::wake() {
  uint64_t one = 1;
  (void)!write(fd_, &one, sizeof one);
}

void PostBox::clear_wake() {
  uint64_t v;
  (void)!read(fd_, &v, sizeof v);
}

PostBox::Drained PostBox::drain() {
  Drained out;
  std::lock_guard<std::mutex> l(mu_);
  out.work.swap(posted_.work);
  out.replies.swap(posted_.replies);
  wake_pending_ = false;
  // Replies held without a wake are taken again at hold_until_; once a turn then finds none, the
  // next one wakes the loop.
  if (holding_) {
    auto now = Clock::now();
    if (hold_until_ == Clock::time_point::max()) {
      hold_until_ = now + kReplyHold;
    } else if (now >= hold_until_) {
      holding_ = !out.replies.empty();
      hold_until_ = holding_ ? now + kReplyHold : Clock::time_point::max();
    }
  }
  return out;
}

}  // namespace yard::detail
