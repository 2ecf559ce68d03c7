// The cluster's head as this process knows it: where its head requests go. When the head does not
// answer (it was lost, and a standby may lead now), the process's node manager is asked where the
// head is (it follows the control store's record of the active head), and requests go to the
// answer from then on. Thread-safe.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace yard::detail {

class Messenger;

class HeadAddress {
 public:
  explicit HeadAddress(std::string address) : a_(std::move(address)) {}
  HeadAddress(const HeadAddress&) = delete;
  HeadAddress& operator=(const HeadAddress&) = delete;
  std::string get() const {
    std::lock_guard<std::mutex> l(mu_);
    return a_;
  }
  // True when it changed.
  bool set(const std::string& address);
  // Asks the node manager at `node` where the head is now, without waiting; its answer replaces
  // the address. One question at a time; none without a node.
  void ask(Messenger& io, const std::string& token, const std::string& node);

 private:
  mutable std::mutex mu_;
  std::string a_;
  std::atomic<bool> asking_{false};
};

}  // namespace yard::detail
