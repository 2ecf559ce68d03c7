#include "policy/res.h"

#include <algorithm>
#include <cstdio>

namespace yard::sched {

bool fits(const Res& need, const Res& have) {
  for (auto& [k, v] : need) {
    if (v <= 0) continue;
    auto it = have.find(k);
    if (it == have.end() || it->second + 1e-9 < v) return false;
  }
  return true;
}

double utilisation(const Res& total, const Res& avail) {
  double u = 0;
  for (auto& [k, t] : total) {
    if (t <= 0 || k == "memory") continue;
    auto it = avail.find(k);
    double a = it == avail.end() ? 0 : it->second;
    u = std::max(u, 1.0 - a / t);
  }
  return u;
}

void add(Res& to, const Res& r) {
  for (auto& [k, v] : r) to[k] += v;
}

void sub(Res& from, const Res& r) {
  for (auto& [k, v] : r) from[k] -= v;
}

std::string res_text(const Res& r) {
  std::string s;
  for (auto& [k, v] : r) {
    char b[64];
    std::snprintf(b, sizeof b, "%s%s: %g", s.empty() ? "" : ", ", k.c_str(), v);
    s += b;
  }
  return s.empty() ? "nothing" : s;
}

}  // namespace yard::sched
