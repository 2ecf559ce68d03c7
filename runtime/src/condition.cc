#include "yard/condition.h"

#include <mutex>

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/mutex.hpp>

namespace yard {

struct Condition::Impl {
  boost::fibers::mutex mu;
  boost::fibers::condition_variable cv;
};

Condition::Condition() : impl_(std::make_unique<Impl>()) {}
Condition::~Condition() = default;

bool Condition::wait_for(const std::function<bool()>& ready, std::chrono::milliseconds timeout,
                         const std::function<void()>& then) {
  std::unique_lock<boost::fibers::mutex> l(impl_->mu);
  bool ok = timeout == std::chrono::milliseconds::max() ? (impl_->cv.wait(l, ready), true)
                                                        : impl_->cv.wait_for(l, timeout, ready);
  if (ok && then) then();
  return ok;
}

void Condition::update(const std::function<void()>& change) {
  {
    std::unique_lock<boost::fibers::mutex> l(impl_->mu);
    change();
  }
  impl_->cv.notify_all();
}

void Condition::read(const std::function<void()>& read) {
  std::unique_lock<boost::fibers::mutex> l(impl_->mu);
  read();
}

}  // namespace yard
