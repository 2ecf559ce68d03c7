#include "messenger.h"

#include "yard/errors.h"

namespace yard::detail {

IoLoop& Channel::open(std::unique_ptr<IoLoop> loop) {
  if (loop_) throw Error("the process's I/O loop is already open");
  loop_ = std::move(loop);
  return *loop_;
}

void Channel::close() {
  if (!loop_) return;
  loop_->stop();
  loop_.reset();
}

IoLoop& Channel::loop() const {
  if (!loop_) throw Error("not connected: the process's I/O loop is not open (yard::init() not called, or shut down)");
  return *loop_;
}

}  // namespace yard::detail
