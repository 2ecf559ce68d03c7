// find_log_lines (node/worker_logs.h): a node's workers' lines of one actor or task, from the
// workers' logs only, oldest file first, the newest lines kept.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "node/worker_logs.h"

namespace fs = std::filesystem;
using yard::sched::find_log_lines;
using yard::sched::LogQuery;

TEST_CASE("a node's workers' lines of an actor or a task", "[logs]") {
  auto dir = fs::temp_directory_path() / ("yard-logs-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, int age_s) {
    std::ofstream(dir / name) << text;
    fs::last_write_time(dir / name, fs::file_time_type::clock::now() - std::chrono::seconds(age_s));
  };
  write("worker-new.log", "x [actor actor-1 C] second life\n[task t-9 f] other task\n", 10);
  write("worker-old.log", "a [actor actor-1 C 'n'] first life\nb [actor actor-12 C] not this one\n"
                          "c [task t-1 f] a task line\n", 100);
  write("node.log", "[actor actor-1 C] the node's own log is not read\n", 50);
  auto actor = find_log_lines(dir.string(), LogQuery{"actor-1", "", 100});
  CHECK(actor == "worker-old: a [actor actor-1 C 'n'] first life\nworker-new: x [actor actor-1 C] second life\n");
  CHECK(find_log_lines(dir.string(), LogQuery{"", "t-1", 100}) == "worker-old: c [task t-1 f] a task line\n");
  // The newest lines only.
  CHECK(find_log_lines(dir.string(), LogQuery{"actor-1", "", 1}) == "worker-new: x [actor actor-1 C] second life\n");
  // Nothing, or both, asked: nothing found; a folder that is not there: nothing.
  CHECK(find_log_lines(dir.string(), LogQuery{"", "", 100}).empty());
  CHECK(find_log_lines(dir.string(), LogQuery{"actor-1", "t-1", 100}).empty());
  CHECK(find_log_lines((dir / "none").string(), LogQuery{"actor-1", "", 100}).empty());
  fs::remove_all(dir);
}
