#include "sim/simulated_nodes.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/join.h"
#include "yard/internal/allocator.h"
#include "yard/internal/messaging.h"
#include "resources.h"
#include "yard/internal/session.h"
#include "yard/errors.h"
#include "yard/process.h"
#include "yard/simulated.h"  // registers the class simulated nodes host whatever the driver

namespace fs = std::filesystem;

namespace yard::sched::sim {

using namespace detail;

void SimulatedNodes::open_session() {
  if (o_.session_dir.empty())
    o_.session_dir = yard_home() + "/session-" + std::to_string(static_cast<long>(start_time_)) + "-" + random_hex(3);
  log_dir_ = o_.session_dir + "/logs";
  fs::create_directories(log_dir_);
  open_log(log_dir_, "sim");
  raise_descriptor_limit();
  heap_for_daemon();
  token_ = o_.join_token;
  token_file_ = o_.session_dir + "/token";
  int fd = ::open(token_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot write " + token_file_);
  (void)!::write(fd, token_.data(), token_.size());
  ::close(fd);
  per_node_ = o_.resources;
  per_node_["CPU"] = o_.num_cpus > 0 ? o_.num_cpus : std::max(1u, std::thread::hardware_concurrency());
  if (o_.num_gpus > 0) per_node_["GPU"] = o_.num_gpus;
  for (auto& [k, v] : per_node_)
    if (!(v >= 0) || !std::isfinite(v)) throw Error("resource " + k + " has a bad amount");
}

void SimulatedNodes::join() {
  Channel io;
  io.open(std::make_unique<IoLoop>(o_.host, 0, token_, [](IoLoop::Incoming) {}));
  auto access = ask_control_store(io, o_.join_address, token_);
  head_ = access.head;
  store_.redis = std::make_unique<Redis>(sys::RedisEndpoint::parse(access.address), access.password, std::chrono::seconds(5));
  store_.tables = std::make_unique<store::Tables>(*store_.redis);
  store_.ledger = control_store_ledger(*store_.redis);
}

// Resources and the heartbeat first, then the membership, as a real node joins.
void SimulatedNodes::add_nodes() {
  std::set<std::string> ids;
  auto ctx = make_io_context(2);  // the nodes' loops share its I/O threads
  for (int i = 0; i < o_.count; ++i) {
    std::string id;
    do id = "node-" + random_hex(4);
    while (!ids.insert(id).second);
    nodes_.push_back(std::make_unique<SimNode>(store_, id, o_.host, token_, per_node_, ctx, head_));
  }
  std::lock_guard lock(store_.mu);
  for (auto& n : nodes_) store_.ledger->open(n->id(), n->total());
  beat_locked();
  for (auto& n : nodes_) store_.tables->nodes.add(n->id(), "node");
}

void SimulatedNodes::beat() {
  std::lock_guard lock(store_.mu);
  beat_locked();
}

void SimulatedNodes::beat_locked() {
  std::vector<std::pair<std::string, store::NodeReport>> reports;
  std::vector<SimNode*> beating;
  double now = unix_time();
  for (auto& n : nodes_) {
    if (n->left()) continue;
    store::NodeReport r;
    r.address = n->address();
    r.hostname = hostname();
    r.pid = getpid();
    r.log_dir = log_dir_;
    r.start_time = start_time_;
    r.now = now;
    r.workers = static_cast<long>(n->actors());
    reports.emplace_back(n->id(), std::move(r));
    beating.push_back(n.get());
  }
  auto ttl = std::chrono::milliseconds(static_cast<long>(o_.heartbeat_timeout_s * 1000));
  auto present = store_.tables->nodes.report_all(reports, ttl, [](const std::string& id) { return avail_key(id); });
  for (size_t i = 0; i < present.size(); ++i)
    if (!present[i]) {
      spdlog::warn("node {} was declared dead while it was silent: it rejoins empty", beating[i]->id());
      beating[i]->rejoin();
    }
}

void SimulatedNodes::leave_all() {
  std::lock_guard lock(store_.mu);
  for (auto& n : nodes_) {
    if (n->left()) continue;
    try {
      store_.tables->nodes.remove(n->id());
    } catch (const std::exception& e) {
      spdlog::error("node {} leaving: {}", n->id(), e.what());
    }
  }
}

int SimulatedNodes::run() {
  try {
    start_time_ = unix_time();
    if (o_.join_address.empty()) throw Error("simulated nodes join a head: give --address HEAD");
    open_session();
    join();
    add_nodes();
    pid_t parent = 0;
    if (const char* pp = getenv("YARD_PARENT_PID")) parent = atoi(pp);
    spdlog::info("{} simulated nodes ({} each) joined {}: {} to {}", nodes_.size(), nlohmann::json(per_node_).dump(), o_.join_address,
                 nodes_.front()->address(), nodes_.back()->address());
    report_ready(o_.ready_fd, nodes_.front()->address() + " " + token_file_);

    std::atomic<bool> stop{false};
    std::thread beater([&] {
      auto period = std::chrono::milliseconds(std::max<long>(100, static_cast<long>(o_.heartbeat_timeout_s * 250)));
      auto next = Clock::now();
      while (!stop.load()) {
        next += period;
        try {
          beat();
        } catch (const std::exception& e) {
          spdlog::error("cannot update the simulated nodes' records: {}", e.what());
        }
        bool all_left = true;
        for (auto& n : nodes_) all_left = all_left && n->left();
        if (all_left) request_stop();
        while (!stop.load() && Clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    wait_for_stop(parent);
    stop.store(true);
    beater.join();
    leave_all();
    nodes_.clear();
    spdlog::info("stopped");
    return 0;
  } catch (const std::exception& e) {
    report_failure(o_.ready_fd, e.what());
    return 1;
  }
}

}  // namespace yard::sched::sim
