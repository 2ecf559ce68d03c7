// A node's GPU devices and the share of each that is free: whole devices for requests of one or
// more, a share of one device for less (the fullest device that still has room, so whole ones
// stay free). Pure: no processes, no I/O.
#pragma once

#include <optional>
#include <utility>
#include <vector>

namespace yard::sched::policy {

class GpuPool {
 public:
  using Devices = std::vector<std::pair<int, double>>;  // (device, share)
  explicit GpuPool(int devices = 0) : free_(static_cast<size_t>(devices), 1.0) {}
  int devices() const { return static_cast<int>(free_.size()); }
  double free_share(int device) const { return free_.at(static_cast<size_t>(device)); }
  // The devices for `amount` GPUs, taken; nullopt (nothing taken) when the free shares do not
  // allow it. An amount of 0 or less takes nothing and succeeds.
  std::optional<Devices> take(double amount);
  // Gives devices back (a device never above whole; unknown devices are ignored).
  void give(const Devices& devices);

 private:
  std::vector<double> free_;
};

}  // namespace yard::sched::policy
