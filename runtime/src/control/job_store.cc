// yard/job_store.h: rendezvous stores (in the cluster's control store, on a Redis of a program's
// own, or in this process alone) and a job's checkpoint records.
#include "yard/job_store.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "yard/errors.h"
#include "yard/internal/control_client.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"
#include "yard/process.h"
#include "yard/yard.h"

namespace yard {

namespace {

constexpr const char* kKeepSeconds = "86400";  // how long a rendezvous value is kept at most

// A rendezvous store on Redis: every key under `prefix`, every command through `client` (the
// process's cluster client, or one of a program's own Redis).
class RedisRendezvous final : public Rendezvous {
 public:
  RedisRendezvous(std::shared_ptr<detail::ControlClient> client, std::string prefix, std::string where)
      : client_(std::move(client)), prefix_(std::move(prefix)), where_(std::move(where)) {}

  void set(const std::string& key, const std::string& value) override {
    run("set " + key, [&](detail::Redis& r) { r.cmd({"SET", prefix_ + key, value, "EX", kKeepSeconds}); });
  }
  std::optional<std::string> get(const std::string& key) override {
    return run("get " + key, [&](detail::Redis& r) -> std::optional<std::string> {
      auto reply = r.cmd({"GET", prefix_ + key});
      if (reply.is_nil()) return std::nullopt;
      return reply.str();
    });
  }
  std::vector<std::string> absent(const std::vector<std::string>& keys) override {
    if (keys.empty()) return {};
    return run("look for " + std::to_string(keys.size()) + " keys", [&](detail::Redis& r) {
      std::vector<std::vector<std::string>> cmds;
      for (auto& k : keys) cmds.push_back({"EXISTS", prefix_ + k});
      auto replies = r.pipeline(cmds);
      std::vector<std::string> out;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!replies[i].error().empty()) throw Error("EXISTS " + keys[i] + ": " + replies[i].error());
        if (replies[i].integer() == 0) out.push_back(keys[i]);
      }
      return out;
    });
  }
  int64_t add(const std::string& key, int64_t by) override {
    // Not idempotent: a command whose connection was lost is not run again.
    return described("add to " + key, [&] {
      return client_->run_once([&](detail::Redis& r) -> int64_t {
        auto replies = r.pipeline({{"INCRBY", prefix_ + key, std::to_string(by)}, {"EXPIRE", prefix_ + key, kKeepSeconds}});
        if (!replies[0].error().empty()) throw Error("INCRBY " + key + ": " + replies[0].error());
        return replies[0].integer();
      });
    });
  }
  void erase(const std::string& key) override {
    run("erase " + key, [&](detail::Redis& r) { r.cmd({"DEL", prefix_ + key}); });
  }
  void erase_prefix(const std::string& prefix) override {
    run("erase " + prefix + "*", [&](detail::Redis& r) {
      std::string match = keys::glob_literal(prefix_ + prefix) + "*";
      std::string cursor = "0";
      do {
        auto reply = r.cmd({"SCAN", cursor, "MATCH", match, "COUNT", "1000"});
        auto head = reply.strings();  // [cursor, [keys...]]
        cursor = head.empty() ? "0" : head[0];
        auto found = reply.nested_strings(1);
        if (!found.empty()) {
          std::vector<std::string> del{"DEL"};
          del.insert(del.end(), found.begin(), found.end());
          r.cmd(del);
        }
      } while (cursor != "0");
    });
  }
  std::string where() const override { return where_; }

 private:
  // Runs fn through the client (again on a new connection when it lost its own); an error says
  // what was being done and where.
  template <class F>
  auto run(const std::string& what, F&& fn) -> decltype(fn(std::declval<detail::Redis&>())) {
    return described(what, [&] { return client_->run(fn); });
  }
  // Runs call(); its error says what was being done and where.
  template <class F>
  auto described(const std::string& what, F&& call) -> decltype(call()) {
    try {
      return call();
    } catch (const ConnectionError& e) {
      throw ConnectionError(where_ + ": cannot " + what + ": " + e.what());
    } catch (const Error& e) {
      throw Error(where_ + ": cannot " + what + ": " + e.what());
    }
  }

  std::shared_ptr<detail::ControlClient> client_;
  std::string prefix_, where_;
};

// A rendezvous store in this process's memory.
class LocalRendezvous final : public Rendezvous {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    values_[key] = value;
  }
  std::optional<std::string> get(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> absent(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> out;
    for (auto& k : keys)
      if (!values_.count(k)) out.push_back(k);
    return out;
  }
  int64_t add(const std::string& key, int64_t by) override {
    std::lock_guard<std::mutex> l(mu_);
    auto& v = values_[key];
    int64_t now = 0;
    if (!v.empty()) {
      try {
        now = std::stoll(v);
      } catch (const std::exception&) {
        throw Error(where() + ": cannot add to " + key + ": its value is not an integer");
      }
    }
    v = std::to_string(now + by);
    return now + by;
  }
  void erase(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    values_.erase(key);
  }
  void erase_prefix(const std::string& prefix) override {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
      it = values_.erase(it);
  }
  std::string where() const override { return "this process's rendezvous store"; }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> values_;  // guarded by mu_
};

}  // namespace

std::vector<std::string> Rendezvous::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  std::vector<std::string> missing = absent(keys);
  while (!missing.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    missing = absent(missing);
  }
  return missing;
}

std::shared_ptr<Rendezvous> job_rendezvous(const std::string& space) {
  if (space.empty()) throw Error("job_rendezvous: a space is needed");
  auto client = detail::cluster_control();
  std::string job = yard::job_id();
  return std::make_shared<RedisRendezvous>(std::move(client), keys::rendezvous_prefix(job, space),
                                           "job " + job + "'s rendezvous store (" + space + ")");
}

std::shared_ptr<Rendezvous> local_rendezvous() { return std::make_shared<LocalRendezvous>(); }

std::shared_ptr<Rendezvous> rendezvous_at(const std::string& address, const std::string& password) {
  sys::RedisEndpoint::parse(address);  // a malformed address is refused now, not at first use
  auto client = std::make_shared<detail::ControlClient>([address, password] {
    return detail::ControlStoreAccess{address, password};
  });
  return std::make_shared<RedisRendezvous>(std::move(client), "", "the rendezvous store at " + address);
}

struct RendezvousServer::Impl {
  sys::RedisServer server;
};
RendezvousServer::RendezvousServer() : impl_(std::make_unique<Impl>()) {}
RendezvousServer::~RendezvousServer() = default;
std::string RendezvousServer::address() const { return impl_->server.address(); }

void record_checkpoint(const std::string& name, const CheckpointRecord& record) {
  auto key = keys::checkpoint(yard::job_id(), name);
  try {
    detail::cluster_control()->run([&](detail::Redis& r) {
      r.cmd({"HSET", key, "step", std::to_string(record.step), "path", record.path});
    });
  } catch (const Error& e) {
    throw Error("cannot record checkpoint " + name + " (step " + std::to_string(record.step) + "): " + e.what());
  }
}

std::optional<CheckpointRecord> latest_checkpoint(const std::string& name) {
  auto key = keys::checkpoint(yard::job_id(), name);
  auto fields = detail::cluster_control()->run([&](detail::Redis& r) { return r.hgetall(key); });
  if (fields.empty()) return std::nullopt;
  CheckpointRecord out;
  try {
    out.step = std::stoull(fields.at("step"));
    out.path = fields.at("path");
  } catch (const std::exception&) {
    throw Error("the checkpoint record of " + name + " (" + key + ") is malformed");
  }
  return out;
}

}  // namespace yard
