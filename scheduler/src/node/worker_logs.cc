#include "node/worker_logs.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;

namespace yard::sched {

std::string find_log_lines(const std::string& log_dir, const LogQuery& q) {
  if (q.actor_id.empty() == q.task_id.empty()) return "";
  const std::string tag = q.actor_id.empty() ? "[task " + q.task_id + " " : "[actor " + q.actor_id + " ";
  // Oldest file first (a restarted actor's earlier workers' lines come before its later ones').
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(log_dir, ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("worker-", 0) != 0 || e.path().extension() != ".log") continue;
    files.emplace_back(fs::last_write_time(e.path(), ec), e.path());
  }
  std::sort(files.begin(), files.end());
  std::deque<std::string> lines;
  for (auto& [when, path] : files) {
    std::ifstream in(path);
    std::string line, worker = path.stem().string();
    while (std::getline(in, line)) {
      if (line.find(tag) == std::string::npos) continue;
      lines.push_back(worker + ": " + line);
      if (lines.size() > q.max_lines) lines.pop_front();
    }
  }
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace yard::sched
