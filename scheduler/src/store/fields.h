// Reading a record's fields (a Redis hash as a map) into typed values. Private to store/.
#pragma once

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "resources.h"

namespace yard::sched::store::fields {

// A field as a number; `otherwise` when absent or not a number.
inline double num(const std::map<std::string, std::string>& f, const char* k, double otherwise = 0) {
  auto it = f.find(k);
  if (it == f.end() || it->second.empty()) return otherwise;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end && *end == '\0' ? v : otherwise;
}
inline std::string text(const std::map<std::string, std::string>& f, const char* k) {
  auto it = f.find(k);
  return it == f.end() ? std::string() : it->second;
}
// HGETALL's flat [key, value, ...] as resources; values that are not numbers are left out.
inline Res res_of(const std::vector<std::string>& kv) {
  Res out;
  for (size_t k = 0; k + 1 < kv.size(); k += 2) {
    char* end = nullptr;
    double v = std::strtod(kv[k + 1].c_str(), &end);
    if (end && *end == '\0') out[kv[k]] = v;
  }
  return out;
}

}  // namespace yard::sched::store::fields
