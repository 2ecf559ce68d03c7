#include "execute/call_pools.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <boost/fiber/all.hpp>

namespace yard::detail {

namespace {

// A pool's queue of calls and its workers' loop, with the waits of the pool's kind of worker.
template <class Mutex, class CondVar>
class CallQueue {
 public:
  CallQueue(int limit, const CallPools::Run& run) : limit_(limit), run_(run) {}
  // Queues the call. True when one more worker should start: more calls wait than idle workers
  // will take (a woken one counts as idle until it takes one), and the group has room.
  bool push(IoLoop::Incoming call) {
    std::lock_guard<Mutex> l(mu_);
    queue_.push_back(std::move(call));
    if (idle_ > 0) cv_.notify_one();
    bool more = static_cast<int>(queue_.size()) > idle_ && workers_ < limit_;
    workers_ += more;
    return more;
  }
  // A worker's life: it runs the calls it takes, one after another.
  void serve() {
    std::unique_lock<Mutex> l(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(l, [&] { return !queue_.empty(); });
      --idle_;
      auto call = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      run_(call);
      call = {};
      l.lock();
    }
  }

 private:
  const int limit_;
  const CallPools::Run& run_;
  Mutex mu_;
  CondVar cv_;
  std::deque<IoLoop::Incoming> queue_;
  int idle_ = 0, workers_ = 0;
};

// Calls on threads, which stay once started. Each has the system's default stack (8 MiB) and
// waits the system's way (it is not a fiber thread).
class ThreadPool final : public CallPools::Pool {
 public:
  ThreadPool(int limit, const CallPools::Run& run) : queue_(limit, run) {}
  ~ThreadPool() override {
    for (auto& t : threads_) t.detach();  // the process exits with its calls (TaskExecutor::run)
  }
  void push(IoLoop::Incoming call) override {
    if (queue_.push(std::move(call))) threads_.emplace_back([this] { queue_.serve(); });
  }

 private:
  CallQueue<std::mutex, std::condition_variable> queue_;
  std::vector<std::thread> threads_;  // executor thread
};

// Calls on fibers of the executor's thread, each with a stack of 8 MiB as a thread's, guarded
// below so that an overflow faults instead of writing over the heap (LibTorch's kernels keep
// kilobytes on the stack); pages a call never touched cost no memory. Executor thread only.
class FiberPool final : public CallPools::Pool {
 public:
  FiberPool(int limit, const CallPools::Run& run) : queue_(limit, run) {}
  void push(IoLoop::Incoming call) override {
    if (!queue_.push(std::move(call))) return;
    boost::fibers::fiber(std::allocator_arg, boost::context::protected_fixedsize_stack(kStackBytes), [this] {
      queue_.serve();
    }).detach();
  }

 private:
  static constexpr size_t kStackBytes = size_t(8) << 20;
  CallQueue<boost::fibers::mutex, boost::fibers::condition_variable> queue_;
};

std::unique_ptr<CallPools::Pool> make_pool(Concurrency how, int limit, const CallPools::Run& run) {
  if (how == Concurrency::kFibers) return std::make_unique<FiberPool>(limit, run);
  return std::make_unique<ThreadPool>(limit, run);
}

}  // namespace

CallPools::CallPools(Concurrency how, int max_concurrency, const std::vector<ConcurrencyGroup>& groups, Run run)
    : run_(std::move(run)) {
  pools_[""] = make_pool(how, std::max(1, max_concurrency), run_);
  for (auto& g : groups) {
    pools_[g.name] = make_pool(how, std::max(1, g.max_concurrency), run_);
    for (auto& m : g.methods) method_group_[m] = g.name;
  }
}

CallPools::~CallPools() = default;

bool CallPools::submit(IoLoop::Incoming& call, const std::string& group, const std::string& method) {
  std::string name = group;
  if (name.empty())
    if (auto m = method_group_.find(method); m != method_group_.end()) name = m->second;
  auto p = pools_.find(name);
  if (p == pools_.end()) return false;
  p->second->push(std::move(call));
  return true;
}

}  // namespace yard::detail
