// What a process has used, from /proc: for benchmarks that watch daemons they started.
#pragma once

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace yard::bench {

// CPU seconds (user + system) a process has used.
inline double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  auto close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  double ut = 0, st = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) ut = std::stod(field);
    if (i == 15) st = std::stod(field);
  }
  return (ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

inline double rss_mb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace yard::bench
