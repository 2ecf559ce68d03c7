#include "autoscale/autoscaler.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace yard::sched {

using json = nlohmann::json;

namespace {
constexpr auto kStopGrace = std::chrono::minutes(12);  // a drain's own timeout is 10 minutes

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

std::optional<std::string> autoscaled_type(const std::string& node_id) {
  if (node_id.rfind("auto-", 0) != 0) return std::nullopt;
  auto dash = node_id.rfind('-');
  if (dash <= 5) return std::nullopt;
  return node_id.substr(5, dash - 5);
}

Autoscaler::Autoscaler(AutoscaleConfig config, std::unique_ptr<NodeProvider> provider, Context c)
    : config_(std::move(config)), provider_(std::move(provider)), c_(std::move(c)) {}

const policy::NodeType* Autoscaler::type(const std::string& name) const {
  for (auto& t : config_.types)
    if (t.name == name) return &t;
  return nullptr;
}

bool Autoscaler::could_hold(const Res& need) const { return policy::some_type_holds(config_.types, need); }

bool Autoscaler::wait_for_node(const Res& need) {
  bool can = could_hold(need);
  poked_ = poked_ || can;
  return can;
}

bool Autoscaler::wait_for_nodes(const policy::GroupRequest& g) {
  bool can;
  if (g.strategy == policy::BundleStrategy::kStrictPack) {
    Res sum;
    for (auto& b : g.bundles) add(sum, b);
    can = could_hold(sum);
  } else {
    can = std::all_of(g.bundles.begin(), g.bundles.end(), [&](const Res& b) { return could_hold(b); });
  }
  poked_ = poked_ || can;
  return can;
}

// Nodes a head before this one started (after a takeover): known by their ids.
void Autoscaler::adopt_running() {
  adopted_ = true;
  for (auto& [id, n] : c_.nodes.all()) {
    auto t = autoscaled_type(id);
    if (!t || !type(*t) || c_.nodes.dead(id) || launched_.count(id)) continue;
    launched_[id] = {*t, Phase::kUp, Clock::now(), "started before this head took over"};
    spdlog::info("autoscaler: node {} ({}) was started by an earlier head: it is managed here", id, *t);
  }
}

bool Autoscaler::child_exited(pid_t pid, int status) {
  auto e = provider_->child_exited(pid, status);
  if (!e) return false;
  auto it = launched_.find(e->node);
  if (it == launched_.end() || !e->node_ended) return true;
  if (it->second.phase == Phase::kLaunching) failed(it->second.type, "starting node " + e->node + ": " + e->failure, Clock::now());
  forget(e->node);
  return true;
}

void Autoscaler::shutdown() {
  for (auto& [id, l] : launched_) provider_->terminate(id);
}

void Autoscaler::forget(const std::string& node) {
  launched_.erase(node);
  idle_since_.erase(node);
}

void Autoscaler::failed(const std::string& t, const std::string& why, Clock::time_point now) {
  auto& h = health_[t];
  ++h.failures;
  h.last_error = why;
  h.retry_at = now + std::chrono::seconds(std::min(60, 1 << std::min(h.failures, 6)));
  spdlog::warn("autoscaler: {} (node type {}, failure {}; next try in {} s)", why, t, h.failures,
               static_cast<long>(seconds(h.retry_at - now)));
  c_.publish(json{{"type", "autoscaler_error"}, {"node_type", t}, {"error", why}, {"time", sys::unix_time()}}.dump());
}

// Launching nodes that joined are up; those that never did, and nodes that are gone, are let go.
void Autoscaler::follow_nodes(Clock::time_point now) {
  std::vector<std::string> gone;
  for (auto& [id, l] : launched_) {
    auto* n = c_.nodes.find(id);
    bool dead = c_.nodes.dead(id);
    if (l.phase == Phase::kLaunching) {
      if (n && !dead) {
        spdlog::info("autoscaler: node {} ({}) joined after {:.1f} s", id, l.type, seconds(now - l.since));
        l.phase = Phase::kUp;
        l.since = now;
        health_[l.type].failures = 0;
      } else if (now - l.since > std::chrono::duration<double>(config_.launch_timeout_s)) {
        failed(l.type, "node " + id + " did not join within " + std::to_string(static_cast<long>(config_.launch_timeout_s)) + " s",
               now);
        gone.push_back(id);
      }
    } else if (!n || dead || (l.phase == Phase::kStopping && now - l.since > kStopGrace)) {
      if (l.phase == Phase::kUp) spdlog::warn("autoscaler: node {} ({}) was lost", id, l.type);
      gone.push_back(id);
    }
  }
  for (auto& id : gone) {
    provider_->terminate(id);
    forget(id);
  }
}

policy::ScaleInput Autoscaler::input(Clock::time_point now) {
  policy::ScaleInput in;
  in.types = config_.types;
  in.idle_timeout_s = config_.idle_timeout_s;
  in.pending = c_.demand();
  for (auto& [id, n] : c_.nodes.all()) {
    if (c_.nodes.dead(id) || launched_.count(id)) continue;
    if (n.alive) in.nodes.push_back({id, "", false, false, n.avail, 0});
  }
  for (auto& [id, l] : launched_) {
    policy::ScaleNode s{id, l.type, l.phase == Phase::kLaunching, l.phase == Phase::kStopping, {}, 0};
    auto* n = c_.nodes.find(id);
    if (s.launching) {
      if (auto* t = type(l.type)) s.avail = t->resources;
    } else if (n) {
      s.avail = n->avail;
      bool idle = n->alive && !s.stopping && n->avail == n->total && c_.runs_nothing(id);
      if (!idle) {
        idle_since_.erase(id);
      } else {
        auto since = idle_since_.emplace(id, now).first->second;
        s.idle_s = seconds(now - since);
      }
    }
    in.nodes.push_back(std::move(s));
  }
  return in;
}

void Autoscaler::launch(const policy::Launch& l, Clock::time_point now) {
  auto* t = type(l.type);
  auto& h = health_[l.type];
  if (!t || now < h.retry_at) return;
  std::string id = "auto-" + l.type + "-" + sys::random_hex(3);
  if (auto problem = provider_->launch(*t, id)) {
    failed(l.type, *problem, now);
    return;
  }
  launched_[id] = {l.type, Phase::kLaunching, now, l.why};
  spdlog::info("autoscaler: starting node {} ({}, {} provider): {}", id, l.type, provider_->name(), l.why);
  c_.publish(json{{"type", "node_launching"}, {"node_id", id}, {"node_type", l.type}, {"why", l.why},
                  {"time", sys::unix_time()}}
                 .dump());
}

void Autoscaler::tick() {
  poked_ = false;
  if (!adopted_) adopt_running();
  auto now = Clock::now();
  follow_nodes(now);
  auto in = input(now);
  pending_ = in.pending.size();
  auto d = policy::autoscale(in);
  unmet_ = std::move(d.unmet);
  for (auto& l : d.launch) launch(l, now);
  for (auto& s : d.stop) {
    auto& l = launched_.at(s.node);
    l.phase = Phase::kStopping;
    l.since = now;
    l.why = s.why;
    idle_since_.erase(s.node);
    spdlog::info("autoscaler: stopping node {} ({}): {}", s.node, l.type, s.why);
    c_.publish(json{{"type", "node_stopping"}, {"node_id", s.node}, {"why", s.why}, {"time", sys::unix_time()}}.dump());
    c_.drain(s.node);
  }
}

json Autoscaler::status() const {
  json types = json::array();
  for (auto& t : config_.types) {
    int up = 0, launching = 0;
    for (auto& [id, l] : launched_)
      if (l.type == t.name) (l.phase == Phase::kLaunching ? launching : up) += 1;
    json row{{"name", t.name}, {"resources", t.resources}, {"min_nodes", t.min_nodes}, {"max_nodes", t.max_nodes},
             {"running", up}, {"launching", launching}};
    auto h = health_.find(t.name);
    if (h != health_.end() && !h->second.last_error.empty() && h->second.failures > 0) {
      row["error"] = h->second.last_error;
      row["failures"] = h->second.failures;
    }
    types.push_back(row);
  }
  json nodes = json::array();
  auto now = Clock::now();
  for (auto& [id, l] : launched_) {
    const char* phase = l.phase == Phase::kLaunching ? "LAUNCHING" : l.phase == Phase::kUp ? "UP" : "STOPPING";
    nodes.push_back({{"node_id", id}, {"node_type", l.type}, {"phase", phase}, {"why", l.why},
                     {"for_s", seconds(now - l.since)}});
  }
  json unmet = json::array();
  for (auto& u : unmet_) unmet.push_back({{"what", u.what}, {"why", u.why}});
  return {{"provider", provider_->name()}, {"config", config_.file}, {"idle_timeout_s", config_.idle_timeout_s},
          {"node_types", types}, {"nodes", nodes}, {"pending_demand", pending_}, {"unmet", unmet}};
}

}  // namespace yard::sched
