// The node's own resources and GPU devices.
//
// Amounts live in a ledger shared with the head (the control store's atomic scripts in the
// cluster), so the head placing an actor here and this node leasing a worker never both take the
// last CPU. The node keeps a picture of what is free, to decide without asking, and refreshes it
// whenever the ledger says otherwise. Devices are this node's alone. A fenced node (declared dead
// while it was cut off) takes nothing until it has reopened with all of its totals free.
#pragma once

#include <optional>
#include <string>

#include "policy/gpus.h"
#include "policy/placement.h"

namespace yard::sched {

// One bundle of a placement group.
struct BundleRef {
  std::string group;
  int index = -1;
  bool empty() const { return group.empty(); }
};

// Where resource amounts are kept. Every call is atomic; a call that fails (the store out of
// reach) says so in the log and takes or gives nothing.
class ResourceLedger {
 public:
  virtual ~ResourceLedger() = default;
  // The node's totals written, everything free (a node starting or rejoining).
  virtual void open(const std::string& node, const Res& total) = 0;
  virtual bool take(const std::string& node, const Res& need) = 0;
  virtual void give(const std::string& node, const Res& amount) = 0;
  // A placement-group bundle's resources (created from `total` on first use).
  virtual bool take_bundle(const BundleRef& b, const Res& total, const Res& need) = 0;
  virtual void give_bundle(const BundleRef& b, const Res& amount) = 0;
  // What the ledger has free for the node; nullopt when it cannot be read.
  virtual std::optional<Res> available(const std::string& node) = 0;
};

class LocalResources {
 public:
  using Devices = policy::GpuPool::Devices;
  LocalResources(ResourceLedger& ledger, std::string node, Res total, int gpus);

  const std::string& node() const { return node_; }
  const Res& total() const { return total_; }
  const Res& available() const { return avail_; }
  // This node as the placement policies see it.
  policy::NodeState state() const { return {node_, total_, avail_, 0}; }
  int gpu_devices() const { return gpus_.devices(); }

  // false when the amounts are not free now (or the node is fenced).
  bool take(const Res& need);
  void give(const Res& amount);
  bool take_bundle(const BundleRef& b, const Res& total, const Res& need) { return ledger_.take_bundle(b, total, need); }
  void give_bundle(const BundleRef& b, const Res& amount) {
    if (!amount.empty()) ledger_.give_bundle(b, amount);
  }
  // Devices for `amount` GPUs; nullopt when the free shares do not allow it.
  std::optional<Devices> take_gpus(double amount) { return gpus_.take(amount); }
  void give_gpus(const Devices& d) { gpus_.give(d); }
  // The picture of what is free, read again from the ledger.
  void refresh();

  // Declared dead while silent: nothing is taken until reopen().
  void fence() { fenced_ = true; }
  bool fenced() const { return fenced_; }
  // Totals written again, all free, fence lifted.
  void reopen();

 private:
  ResourceLedger& ledger_;
  std::string node_;
  Res total_, avail_;
  policy::GpuPool gpus_;
  bool fenced_ = false;
};

}  // namespace yard::sched
