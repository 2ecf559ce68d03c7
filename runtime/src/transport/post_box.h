// What other threads hand the I/O loop: closures to run on it, and replies to send. Handing over
// wakes the loop through an eventfd, once per turn at most: a wake already on its way is not
// written again. Replies handed over "soon" (an executor with more calls queued) are held
// without a wake for at most kReplyHold, so a burst of them joins one turn.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "framing.h"

namespace yard::detail {

class PostBox {
 public:
  static constexpr auto kReplyHold = std::chrono::milliseconds(1);
  PostBox();
  ~PostBox();
  PostBox(const PostBox&) = delete;
  PostBox& operator=(const PostBox&) = delete;

  // Thread-safe.
  void post(std::function<void()> fn);
  void hand_over_reply(std::string routing_id, Frames frames, bool soon);
  void wake();  // writes the wake fd: the loop's poll returns

  // Loop thread only: the descriptor to poll, emptied by clear_wake() once it is readable.
  int fd() const { return fd_; }
  void clear_wake();
  struct Drained {
    std::vector<std::function<void()>> work;
    std::vector<std::pair<std::string, Frames>> replies;
  };
  // What was handed over since the last drain.
  Drained drain();
  // When held replies are to be taken (Clock::time_point::max() when none are held).
  Clock::time_point hold_until() const { return hold_until_; }

 private:
  int fd_ = -1;
  std::mutex mu_;
  Drained posted_;             // guarded by mu_
  bool wake_pending_ = false;  // guarded by mu_: the wake fd was written since the last drain
  bool holding_ = false;       // guarded by mu_: replies handed over without a wake
  Clock::time_point hold_until_ = Clock::time_point::max();  // loop thread only
};

}  // namespace yard::detail
