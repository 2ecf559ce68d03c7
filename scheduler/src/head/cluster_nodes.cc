#include "head/cluster_nodes.h"

#include <spdlog/spdlog.h>

#include "resources.h"
#include "yard/internal/redis.h"

namespace yard::sched {

// Heartbeating (not declared dead), not draining, reachable, and offering its resources.
bool ClusterNodes::takes_work(const Node& n, bool offers) const {
  return !dead_.count(n.id) && !draining_.count(n.id) && !n.address.empty() && offers;
}

void ClusterNodes::refresh() {
  flush();
  version_ = tables_.nodes.version();
  version_read_ = std::chrono::steady_clock::now();
  std::set<std::string> seen;
  for (auto& r : tables_.nodes.with_resources()) {
    seen.insert(r.id);
    auto& n = nodes_[r.id];
    n.id = r.id;
    n.address = r.address;
    n.hostname = r.hostname;
    n.total = std::move(r.total);
    n.avail = std::move(r.avail);
    n.alive = takes_work(n, r.has_avail);
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) it = seen.count(it->first) ? std::next(it) : nodes_.erase(it);
  rebuild_view();
}

void ClusterNodes::refresh_free() {
  flush();
  auto version = tables_.nodes.version();
  version_read_ = std::chrono::steady_clock::now();
  if (version != version_) return refresh();
  std::vector<std::string> ids;
  ids.reserve(nodes_.size());
  for (auto& [id, n] : nodes_) ids.push_back(id);
  auto free = tables_.nodes.free_resources(ids);
  bool liveness_changed = false;
  for (size_t i = 0; i < ids.size() && i < free.size(); ++i) {
    auto& n = nodes_[ids[i]];
    n.avail = free[i] ? std::move(*free[i]) : Res{};
    bool alive = takes_work(n, free[i].has_value());
    liveness_changed |= alive != n.alive;
    n.alive = alive;
  }
  // The same nodes take work: their rows are updated in place and the actor counts kept (counted
  // up with each placement; counted again from the actors now and then, since deaths are not
  // counted down). Counting walks every actor, too much for every refresh of a large cluster.
  auto now = std::chrono::steady_clock::now();
  if (liveness_changed || now - counted_ >= kRecount) return rebuild_view();
  for (auto& id : ids) update_view(id);
}

bool ClusterNodes::refresh_if_joined(std::chrono::milliseconds fresh_enough) {
  auto now = std::chrono::steady_clock::now();
  if (fresh_enough.count() > 0 && now - version_read_ < fresh_enough) return false;
  try {
    version_read_ = now;
    if (tables_.nodes.version() != version_) refresh();
  } catch (const std::exception& e) {
    spdlog::warn("reading the cluster's membership: {} (placing on what was read before)", e.what());
  }
  return true;
}

void ClusterNodes::rebuild_view() {
  feasible_.clear();
  view_.nodes.clear();
  in_view_.clear();
  for (auto& [id, n] : nodes_)
    if (n.alive) {
      in_view_[id] = view_.nodes.size();
      view_.nodes.push_back({id, n.total, n.avail, 0});
    }
  view_.index();
  if (count_actors_) count_actors_(view_);
  counted_ = std::chrono::steady_clock::now();
}

void ClusterNodes::update_view(const std::string& node) {
  auto v = in_view_.find(node);
  auto n = nodes_.find(node);
  if (v != in_view_.end() && n != nodes_.end()) view_.set_avail(v->second, n->second.avail);
}

bool ClusterNodes::fits_some_node(const Res& need) {
  auto [it, fresh] = feasible_.try_emplace(need, false);
  if (fresh)
    for (auto& n : view_.nodes)
      if (fits(need, n.total)) {
        it->second = true;
        break;
      }
  return it->second;
}

bool ClusterNodes::reread(const std::string& node) {
  auto n = nodes_.find(node);
  if (n == nodes_.end() || !in_view_.count(node)) return false;
  try {
    auto avail = read_res(redis_, avail_key(node));
    if (avail == n->second.avail) return false;
    n->second.avail = std::move(avail);
  } catch (const std::exception& e) {
    spdlog::error("reading node {}'s resources: {}", node, e.what());
    return false;
  }
  update_view(node);
  return true;
}

void ClusterNodes::count_placed(const std::string& node) {
  if (auto v = in_view_.find(node); v != in_view_.end()) view_.set_actors(v->second, view_.nodes[v->second].actors + 1);
}

const ClusterNodes::Node* ClusterNodes::find(const std::string& id) const {
  auto n = nodes_.find(id);
  return n == nodes_.end() ? nullptr : &n->second;
}

std::string ClusterNodes::address(const std::string& id) const {
  auto* n = find(id);
  return n ? n->address : std::string();
}

void ClusterNodes::mark_dead(const std::string& id) {
  dead_.insert(id);
  if (auto n = nodes_.find(id); n != nodes_.end()) n->second.alive = false;
  rebuild_view();
}

void ClusterNodes::mark_alive(const std::string& id) { dead_.erase(id); }

std::map<std::string, int> ClusterNodes::by_state() const {
  std::map<std::string, int> n{{"alive", 0}, {"draining", 0}, {"dead", 0}, {"unavailable", 0}};
  for (auto& [id, node] : nodes_)
    ++n[dead_.count(id) ? "dead" : draining_.count(id) ? "draining" : node.alive ? "alive" : "unavailable"];
  for (auto& id : dead_)
    if (!nodes_.count(id)) ++n["dead"];
  return n;
}

void ClusterNodes::start_drain(const std::string& id) {
  draining_.insert(id);
  if (auto n = nodes_.find(id); n != nodes_.end()) n->second.alive = false;
  rebuild_view();
}

Problem ClusterNodes::reserve(const Items& items, const std::vector<std::string>& then_hset) {
  Problem why;
  // The records gathered so far ride in the same round trip, ahead of the reservation.
  auto before = tables_.link.take_gathered();
  try {
    why = sched::reserve(redis_, items, then_hset, pending_release_, pending_del_, before);
    pending_release_.clear();
    pending_del_.clear();
  } catch (const std::exception& e) {
    tables_.link.put_back(std::move(before));
    why = e.what();
  }
  for (auto& [node, res] : items) {
    auto n = nodes_.find(node);
    if (n == nodes_.end()) continue;
    if (!why) {
      sub(n->second.avail, res);
    } else {
      try {
        n->second.avail = read_res(redis_, avail_key(node));
      } catch (const std::exception& e) {
        spdlog::error("reading node {}'s resources: {}", node, e.what());
      }
    }
    update_view(node);
  }
  return why;
}

void ClusterNodes::release_later(const Items& items, const std::vector<std::string>& keys) {
  pending_release_.insert(pending_release_.end(), items.begin(), items.end());
  pending_del_.insert(pending_del_.end(), keys.begin(), keys.end());
  for (auto& [node, res] : items)
    if (auto n = nodes_.find(node); n != nodes_.end()) {
      add(n->second.avail, res);
      update_view(node);
    }
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  io_.after(std::chrono::milliseconds(2), [this] { flush(); });
}

void ClusterNodes::flush() {
  flush_scheduled_ = false;
  if (pending_release_.empty() && pending_del_.empty()) return;
  try {
    release_all(redis_, pending_release_, pending_del_);
    pending_release_.clear();
    pending_del_.clear();
  } catch (const std::exception& e) {
    spdlog::error("giving back resources of removed placement groups: {}", e.what());
  }
}

}  // namespace yard::sched
