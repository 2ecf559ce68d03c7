#include "objects/memory_store.h"

#include <algorithm>
#include <atomic>

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/mutex.hpp>

#include "objects/node_memory.h"
#include "wire.capnp.h"
#include "yard/errors.h"

namespace yard::detail {

namespace {
thread_local bool t_fiber_thread = false;
}  // namespace

void MemoryStore::mark_fiber_thread() { t_fiber_thread = true; }

// Counts completions without a lock; the waiter is woken once, when the last one it needs
// arrives (or the first error, for a waiter that stops on one). A waiter on a thread that runs
// calls on fibers (an executor) waits on fiber primitives, suspending only its call; any other
// thread (a driver's) waits on the system's: the fiber primitives' spinlocks spin while their
// holder, on a machine with more threads than cores, waits to be scheduled.
struct MemoryStore::Waiter {
  const bool fiber = t_fiber_thread;
  boost::fibers::mutex fm;
  boost::fibers::condition_variable fcv;
  std::mutex m;
  std::condition_variable cv;
  std::atomic<size_t> remaining{1};
  bool stop_on_error = false;
  bool done = false;  // guarded by fm or m
  void notify(bool error) {
    bool fire;
    if (error && stop_on_error) {
      fire = remaining.exchange(0) != 0;
    } else {
      size_t r = remaining.load();
      while (r > 0 && !remaining.compare_exchange_weak(r, r - 1)) {
      }
      fire = r == 1;
    }
    if (!fire) return;
    if (fiber) {
      std::unique_lock<boost::fibers::mutex> l(fm);
      done = true;
      fcv.notify_all();
      return;
    }
    std::lock_guard<std::mutex> l(m);
    done = true;
    cv.notify_all();
  }
  // False on timeout.
  bool wait(Duration timeout) {
    auto ready = [&] { return done; };
    if (fiber) {
      std::unique_lock<boost::fibers::mutex> l(fm);
      if (timeout == Duration::max()) {
        fcv.wait(l, ready);
        return true;
      }
      return fcv.wait_for(l, timeout, ready);
    }
    std::unique_lock<std::mutex> l(m);
    if (timeout == Duration::max()) {
      cv.wait(l, ready);
      return true;
    }
    return cv.wait_for(l, timeout, ready);
  }
};

// Small values' bytes gather here, under the lock already held, before they reach the node's
// counters (which gather them again, lock-free, for every thread of the process): a stream of
// small results costs no atomic operation each.
void MemoryStore::count_used(int64_t delta) {
  unpublished_ += delta;
  if (unpublished_ < NodeMemory::kPublishBytes && unpublished_ > -NodeMemory::kPublishBytes) return;
  node_->add_used(unpublished_);
  unpublished_ = 0;
}

void MemoryStore::Entry::remove_waiter(const std::shared_ptr<Waiter>& w) {
  if (waiter == w) waiter.reset();
  more_waiters.erase(std::remove(more_waiters.begin(), more_waiters.end(), w), more_waiters.end());
}

void MemoryStore::create(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  entries_.try_emplace(id);
}

void MemoryStore::set_value(const std::string& id, Bytes value) {
  complete(id, std::move(value), std::nullopt);
}

void MemoryStore::set_error(const std::string& id, ErrorInfo error) {
  complete(id, nullptr, std::move(error));
}

void MemoryStore::replace_value(const std::string& id, const Bytes& old, Bytes now) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.ready && it->second.value == old) it->second.value = std::move(now);
}

void MemoryStore::complete(const std::string& id, Bytes value, std::optional<ErrorInfo> error) {
  std::shared_ptr<Waiter> waiter;
  std::vector<std::shared_ptr<Waiter>> waiters;
  std::vector<std::function<void()>> callbacks;
  bool over = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.ready) return;
    auto& e = it->second;
    e.ready = true;
    e.value = std::move(value);
    if (error) e.error = std::make_unique<ErrorInfo>(std::move(*error));
    if (node_ && e.value) {
      e.counted = e.value->size();
      e.last_use = ++tick_;
      count_used(int64_t(e.counted));
      over = node_->over_limit();
    }
    waiter = std::move(e.waiter);
    waiters.swap(e.more_waiters);
    callbacks.swap(e.callbacks);
  }
  if (over) spill_cv_.notify_one();
  bool failed = error.has_value();
  if (waiter) waiter->notify(failed);
  for (auto& w : waiters) w->notify(failed);
  for (auto& cb : callbacks) cb();
}

void MemoryStore::release(const std::string& id) {
  std::vector<std::function<void()>> callbacks;
  std::string spilled;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    auto& e = it->second;
    callbacks.swap(e.callbacks);
    if (node_ && e.counted) {
      if (e.spill_path.empty()) count_used(-int64_t(e.counted));
      else node_->add_spilled(-int64_t(e.counted), -1);
    }
    spilled = std::move(e.spill_path);
    entries_.erase(it);
  }
  if (!spilled.empty()) remove_spill_file(spilled);
  for (auto& cb : callbacks) cb();
}

void MemoryStore::on_ready(const std::string& id, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end() && !it->second.ready) {
      it->second.callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

MemoryStore::Snapshot MemoryStore::peek(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Snapshot s;
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.ready) return s;
  s.present = true;
  s.value = use(id, it->second);
  if (it->second.error) s.error = *it->second.error;
  return s;
}

Bytes MemoryStore::get(const std::string& id, Duration timeout) {
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) throw Error("object " + id + " is not known to this process (freed, or owned elsewhere)");
    auto& e = it->second;
    if (e.ready) {
      if (e.error) throw_error(*e.error);
      return use(id, e);
    }
    w = std::make_shared<Waiter>();
    e.add_waiter(w);
  }
  if (!w->wait(timeout)) {
    drop_waiter(id, w);
    throw TimeoutError("object " + id + " was not ready within " + std::to_string(timeout.count()) + " ms");
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) throw Error("object " + id + " was freed while waiting for it");
  if (it->second.error) throw_error(*it->second.error);
  return use(id, it->second);
}

void MemoryStore::drop_waiter(const std::string& id, const std::shared_ptr<Waiter>& w) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.remove_waiter(w);
}

// One pass under the lock: the waiter goes on every entry not yet complete, and needs as many of
// them as make up `num`.
std::vector<size_t> MemoryStore::wait(const std::vector<std::string>& ids, size_t num, Duration timeout) {
  num = std::min(num, ids.size());
  auto w = std::make_shared<Waiter>();
  bool attached = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    size_t pending = 0;
    for (auto& id : ids) {
      auto it = entries_.find(id);
      if (it == entries_.end() || it->second.ready) continue;
      it->second.add_waiter(w);
      ++pending;
    }
    size_t ready = ids.size() - pending;
    w->remaining = ready >= num ? 0 : num - ready;
    attached = pending > 0;
  }
  if (w->remaining > 0) w->wait(timeout);
  std::vector<size_t> out;
  out.reserve(ids.size());
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = entries_.find(ids[i]);
    if (it == entries_.end() || it->second.ready) {
      out.push_back(i);
    } else if (attached) {
      it->second.remove_waiter(w);
    }
  }
  return out;
}

std::vector<Bytes> MemoryStore::get_all(const std::vector<std::string>& ids, Duration timeout) {
  auto deadline = timeout == Duration::max() ? std::chrono::steady_clock::time_point::max()
                                             : std::chrono::steady_clock::now() + timeout;
  auto w = std::make_shared<Waiter>();
  w->stop_on_error = true;
  // The entries found in the first pass, for the second: the caller holds their refs, so none is
  // released in between (an entry's node stays put in the map until it is).
  std::vector<Entry*> found(ids.size(), nullptr);
  size_t looked = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    size_t pending = 0;
    for (; looked < ids.size(); ++looked) {
      auto it = entries_.find(ids[looked]);
      if (it == entries_.end()) continue;
      found[looked] = &it->second;
      if (it->second.ready) {
        if (it->second.error) {
          pending = 0;
          ++looked;
          break;
        }
        continue;
      }
      it->second.add_waiter(w);
      ++pending;
    }
    w->remaining = pending;
  }
  auto entry = [&](size_t k) -> Entry* {
    if (k < looked) return found[k];
    auto it = entries_.find(ids[k]);
    return it == entries_.end() ? nullptr : &it->second;
  };
  if (w->remaining > 0) w->wait(timeout);
  // In order, as one get after another would: the first failure in order is thrown, and one not
  // ready yet (another failed first, or time ran out) is waited for on its own.
  std::vector<Bytes> out;
  out.reserve(ids.size());
  size_t i = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (; i < ids.size(); ++i) {
      Entry* e = entry(i);
      if (!e || !e->ready) break;
      if (e->error) throw_error(*e->error);
      out.push_back(use(ids[i], *e));
    }
    for (size_t j = i; j < ids.size(); ++j) {
      Entry* e = entry(j);
      if (e && !e->ready) e->remove_waiter(w);
    }
  }
  for (; i < ids.size(); ++i) {
    Duration left = Duration::max();
    if (timeout != Duration::max())
      left = std::max(Duration(0), std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now()));
    out.push_back(get(ids[i], left));
  }
  return out;
}

bool MemoryStore::contains(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.count(id) > 0;
}

size_t MemoryStore::size() {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

void throw_error(const ErrorInfo& e) {
  switch (static_cast<wire::ErrorCode>(e.code)) {
    case wire::ErrorCode::TASK_ERROR: throw RemoteError(e.type, e.message, e.location);
    case wire::ErrorCode::WORKER_CRASHED: throw WorkerCrashed(e.message);
    case wire::ErrorCode::ACTOR_DIED: throw ActorDied(e.message);
    case wire::ErrorCode::ACTOR_RESTARTING: throw ActorRestarting(e.message);
    case wire::ErrorCode::OWNER_DIED: throw OwnerDied(e.message);
    case wire::ErrorCode::TIMEOUT: throw TimeoutError(e.message);
    case wire::ErrorCode::INFEASIBLE: throw InfeasibleError(e.message);
    case wire::ErrorCode::UNAUTHENTICATED: throw AuthError(e.message);
    case wire::ErrorCode::NOT_FOUND: throw NotFoundError(e.message);
    case wire::ErrorCode::BAD_REQUEST: throw InvalidArgument(e.message);
    default: throw Error(e.message);
  }
}

}  // namespace yard::detail
