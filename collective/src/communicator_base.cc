// The parts of Communicator that every backend shares (also linked into the NCCL library):
// dtype helpers and the asynchronous runner.
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "yard/collective.h"

namespace yard::collective {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

namespace impl {

// One background thread per communicator that runs asynchronous operations in order.
class AsyncRunner {
 public:
  AsyncRunner() : thread_([this] { loop(); }) {}
  ~AsyncRunner() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;  // stopping, and everything queued has run
        fn = std::move(q_.front());
        q_.pop_front();
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;  // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  std::thread thread_;
};

}  // namespace impl

namespace {

class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> f) : f_(std::move(f)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    if (f_.wait_for(timeout) != std::future_status::ready) return false;
    f_.get();  // rethrows
    return true;
  }
  bool done() const override { return f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  std::shared_future<void> f_;
};

}  // namespace

WorkPtr Communicator::async(std::function<void(Communicator&)> op) {
  if (!runner_) runner_ = std::make_shared<impl::AsyncRunner>();
  auto p = std::make_shared<std::promise<void>>();
  auto w = std::make_shared<FutureWork>(p->get_future().share());
  runner_->push([this, op = std::move(op), p] {
    try {
      op(*this);
      p->set_value();
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  return w;
}

WorkPtr Communicator::allreduce_async(void* data, size_t count, DType t, ReduceOp op, const Options& o) {
  return async([=](Communicator& c) { c.allreduce(data, count, t, op, o); });
}
WorkPtr Communicator::allreduce_coalesced_async(std::vector<std::pair<void*, size_t>> buffers, DType t,
                                                ReduceOp op, const Options& o) {
  return async([=](Communicator& c) { c.allreduce_coalesced(buffers, t, op, o); });
}
WorkPtr Communicator::broadcast_async(void* data, size_t count, DType t, int root, const Options& o) {
  return async([=](Communicator& c) { c.broadcast(data, count, t, root, o); });
}
WorkPtr Communicator::allgather_async(const void* in, void* out, size_t count, DType t, const Options& o) {
  return async([=](Communicator& c) { c.allgather(in, out, count, t, o); });
}
void Communicator::stop_async() { runner_.reset(); }

}  // namespace yard::collective
