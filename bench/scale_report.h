// How the scale bench reports: one JSON line per case, and the smallest size's figures passed to
// the larger sizes' processes (SCALE_SMALLEST: "name value ...", each case's name less its size)
// as the peers of their ratios.
#pragma once

#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace yard::bench::scale {

// The smallest size's figures by case name, less the size. Empty at the smallest size.
using Figures = std::map<std::string, double>;

inline void emit(const std::string& name, double value, const char* unit, const std::string& peer = {},
                 double peer_value = 0) {
  if (!peer.empty())
    std::printf("{\"suite\":\"scale\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\",\"peer\":\"%s\","
                "\"peer_value\":%.4g,\"ratio\":%.4g,\"settings\":\"the peer is the same case at the smallest size (a "
                "creation rate's: the same head, Redis and simulator processes), or the heartbeat timeout + 1 s\"}\n",
                name.c_str(), value, unit, peer.c_str(), peer_value, value / peer_value);
  else
    std::printf("{\"suite\":\"scale\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\"}\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

// Case `name` + `tag` with the same case at the smallest size as its peer, when this is not the
// smallest.
inline void emit_against_smallest(const std::string& name, const std::string& tag, double value, const char* unit,
                                  const Figures& smallest) {
  if (smallest.empty())
    emit(name + tag, value, unit);
  else
    emit(name + tag, value, unit, name + "_smallest_size", smallest.at(name));
}

// SCALE_SMALLEST's figures (none when unset).
inline Figures smallest_figures(const char* text) {
  Figures f;
  std::istringstream in(text ? text : "");
  std::string name;
  double value;
  while (in >> name >> value) f[name] = value;
  return f;
}

// Appends a printed line's case to `cases` ("name value "), when it is one of this size's (its
// name ends with `tag`).
inline void add_case(std::string& cases, const std::string& line, const std::string& tag) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return;
  auto name = j.value("case", "");
  if (name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0)
    cases += name.substr(0, name.size() - tag.size()) + " " + std::to_string(j["value"].get<double>()) + " ";
}

}  // namespace yard::bench::scale
