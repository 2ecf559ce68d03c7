#include "memory_store.h"

#include <algorithm>

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/mutex.hpp>

#include "node_memory.h"
#include "wire.capnp.h"
#include "yard/errors.h"

namespace yard::detail {

struct MemoryStore::Waiter {
  boost::fibers::mutex m;
  boost::fibers::condition_variable cv;
  size_t remaining = 1;
  void notify() {
    std::unique_lock<boost::fibers::mutex> l(m);
    if (remaining > 0) --remaining;
    cv.notify_all();
  }
};

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
      node_->add_used(int64_t(e.counted));
      over = node_->over_limit();
    }
    waiters.swap(e.waiters);
    callbacks.swap(e.callbacks);
  }
  if (over) spill_cv_.notify_one();
  for (auto& w : waiters) w->notify();
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
      if (e.spill_path.empty()) node_->add_used(-int64_t(e.counted));
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
    if (!e.ready) {
      w = std::make_shared<Waiter>();
      e.waiters.push_back(w);
    }
  }
  if (w) {
    std::unique_lock<boost::fibers::mutex> l(w->m);
    auto done = [&] { return w->remaining == 0; };
    if (timeout == Duration::max()) {
      w->cv.wait(l, done);
    } else if (!w->cv.wait_for(l, timeout, done)) {
      throw TimeoutError("object " + id + " was not ready within " + std::to_string(timeout.count()) + " ms");
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) throw Error("object " + id + " was freed while waiting for it");
  if (it->second.error) throw_error(*it->second.error);
  return use(id, it->second);
}

std::vector<size_t> MemoryStore::wait(const std::vector<std::string>& ids, size_t num, Duration timeout) {
  num = std::min(num, ids.size());
  auto w = std::make_shared<Waiter>();
  size_t ready = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& id : ids) {
      auto it = entries_.find(id);
      if (it == entries_.end() || it->second.ready) ++ready;
    }
    if (ready < num) {
      // Wake when enough of the others complete.
      w->remaining = num - ready;
      for (auto& id : ids) {
        auto it = entries_.find(id);
        if (it != entries_.end() && !it->second.ready) it->second.waiters.push_back(w);
      }
    }
  }
  if (ready < num) {
    std::unique_lock<boost::fibers::mutex> l(w->m);
    auto done = [&] { return w->remaining == 0; };
    if (timeout == Duration::max()) w->cv.wait(l, done);
    else w->cv.wait_for(l, timeout, done);
  }
  std::vector<size_t> out;
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = entries_.find(ids[i]);
    if (it == entries_.end() || it->second.ready) out.push_back(i);
    else {
      auto& ws = it->second.waiters;
      ws.erase(std::remove(ws.begin(), ws.end(), w), ws.end());
    }
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
    default: throw Error(e.message);
  }
}

}  // namespace yard::detail
