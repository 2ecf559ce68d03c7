#include "rendezvous_store.h"

#include "yard/collective.h"

namespace yard::collective {

GroupStore::GroupStore(std::shared_ptr<Rendezvous> store, const std::string& group, const std::string& generation,
                       std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(group + ":" + generation + ":"), group_(group), timeout_(timeout) {}

template <class F>
auto GroupStore::guarded(F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const CollectiveError&) {
    throw;
  } catch (const Error& e) {
    throw CollectiveError("group '" + group_ + "': " + e.what());
  }
}

void GroupStore::set(const std::string& key, const std::vector<char>& data) {
  guarded([&] { store_->set(prefix_ + key, std::string(data.begin(), data.end())); });
}

std::vector<char> GroupStore::get(const std::string& key) {
  wait({key});
  auto v = guarded([&] { return store_->get(prefix_ + key); });
  if (!v) throw CollectiveError("group '" + group_ + "': key " + key + " went away while it was read");
  return std::vector<char>(v->begin(), v->end());
}

std::string GroupStore::peek(const std::string& key) {
  return guarded([&] { return store_->get(prefix_ + key); }).value_or(std::string());
}

void GroupStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GroupStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  for (auto& k : keys) full.push_back(prefix_ + k);
  auto missing = guarded([&] { return store_->wait(full, timeout); });
  if (missing.empty()) return;
  std::string names;
  for (auto& k : missing) names += (names.empty() ? "" : ", ") + k.substr(prefix_.size());
  throw CollectiveError("group '" + group_ + "': members did not arrive within " + std::to_string(timeout.count()) +
                        " ms (missing keys: " + names + ")");
}

long long GroupStore::incr(const std::string& key) {
  return guarded([&] { return store_->add(prefix_ + key, 1); });
}

void GroupStore::erase(const std::string& key) {
  guarded([&] { store_->erase(prefix_ + key); });
}

void GroupStore::remove_all() {
  guarded([&] { store_->erase_prefix(prefix_); });
}

}  // namespace yard::collective
