// Resource accounting in the control store: every node's total and available resources are two
// Redis hashes, changed only by Lua scripts, so concurrent placements from any number of clients
// (head, node managers, several heads during a restart) never over-commit a node.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "policy/res.h"
#include "result.h"

namespace yard::sys {
class Redis;
}
namespace yard::detail {
using sys::Redis;
}

namespace yard::sched {

std::string total_key(const std::string& node);
std::string avail_key(const std::string& node);

// Writes a node's totals and makes everything available (a node starting or rejoining).
void register_resources(detail::Redis& r, const std::string& node, const Res& total);
// Removes a node's resources: nothing can be placed there any more.
void unregister_resources(detail::Redis& r, const std::string& node);

// Reserves every (node, resources) item, all or nothing. nullopt on success, else what did not
// fit ("node-x: CPU" or "node-x: gone").
// `then_hset` (key, field, value, field, value...) is written in the same atomic step on success.
// `release_first` and `del_first` (keys) are given back / deleted just before, in the same round
// trip, and `before` (commands) ahead of those: their error replies are logged.
Problem reserve(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items,
                    const std::vector<std::string>& then_hset = {},
                    const std::vector<std::pair<std::string, Res>>& release_first = {},
                    const std::vector<std::string>& del_first = {},
                    const std::vector<std::vector<std::string>>& before = {});
// Gives resources back to a node (never above its total; nothing happens for a removed node).
void release(detail::Redis& r, const std::string& node, const Res& res);
// Gives back several (node, resources) items in one script.
// `then_del` (keys) are deleted in the same atomic step.
void release_all(detail::Redis& r, const std::vector<std::pair<std::string, Res>>& items,
                 const std::vector<std::string>& then_del = {});

// A placement-group bundle's free resources, shared by the head (actors in it) and the bundle's
// node (tasks in it). The hash is created from the bundle's totals on first use.
std::string bundle_key(const std::string& group, int index);
bool reserve_bundle(detail::Redis& r, const std::string& key, const Res& bundle_total, const Res& need);
void release_bundle(detail::Redis& r, const std::string& key, const Res& res);

// A hash of numbers (empty when the key does not exist).
Res read_res(detail::Redis& r, const std::string& key);

// A node's resources kept with these scripts (node/ledger.cc).
class ResourceLedger;
std::unique_ptr<ResourceLedger> control_store_ledger(detail::Redis& r);

}  // namespace yard::sched
