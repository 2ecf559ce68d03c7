// Reading an indexed ClusterView (placement.h: its amounts as flat rows, a column per resource
// name): a request by column, and a node's fit and busyness from contiguous numbers. The
// placement policies use these when the view is indexed and the maps otherwise, with the same
// answers.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "policy/placement.h"

namespace yard::sched::policy {

// A request against an indexed view: its amounts by column; impossible when it names a resource
// no node has.
struct FlatNeed {
  std::vector<std::pair<size_t, double>> cols;
  bool impossible = false;
  FlatNeed(const ClusterView& v, const Res& need) {
    for (auto& [k, amount] : need) {
      if (amount <= 0) continue;
      auto it = std::lower_bound(v.keys.begin(), v.keys.end(), k);
      if (it == v.keys.end() || *it != k) {
        impossible = true;
        continue;
      }
      cols.emplace_back(static_cast<size_t>(it - v.keys.begin()), amount);
    }
  }
  bool fits(const double* row) const {
    if (impossible) return false;
    for (auto& [c, amount] : cols)
      if (row[c] + 1e-9 < amount) return false;
    return true;
  }
};

// A view's rows, when it has them.
class Rows {
 public:
  explicit Rows(const ClusterView& v) : v_(v), width_(v.keys.size()) {
    auto m = std::lower_bound(v.keys.begin(), v.keys.end(), std::string("memory"));
    if (m != v.keys.end() && *m == "memory") memory_col_ = static_cast<size_t>(m - v.keys.begin());
  }
  bool on() const { return v_.indexed() && !v_.nodes.empty(); }
  const double* total(size_t i) const { return v_.total.data() + i * width_; }
  const double* avail(size_t i) const { return v_.avail.data() + i * width_; }
  // utilisation() over node i's rows: its busiest resource, memory left out.
  double utilisation(size_t i) const {
    const double* t = total(i);
    const double* a = avail(i);
    double u = 0;
    for (size_t c = 0; c < width_; ++c) {
      if (t[c] <= 0 || c == memory_col_) continue;
      u = std::max(u, 1.0 - a[c] / t[c]);
    }
    return u;
  }

 private:
  const ClusterView& v_;
  size_t width_;
  size_t memory_col_ = static_cast<size_t>(-1);
};

}  // namespace yard::sched::policy
