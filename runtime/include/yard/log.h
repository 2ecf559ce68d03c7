// Lines a task or an actor writes to its worker's log, tagged with what it runs in, so that
// `yard logs --actor NAME` and `yard logs --task ID` find them later on whichever node they were
// written (Ray's worker logs, searched by actor or task).
//
//   int add(int a, int b) {
//     yard::log_info("adding " + std::to_string(a) + " and " + std::to_string(b));
//     return a + b;
//   }
//
// In a worker the line goes to its log (<session>/logs/<worker>.log on its node), as
//   [time] [info] [task <id> add] adding 1 and 2          (a task: its result's ObjectRef id)
//   [time] [info] [actor <id> Counter 'name'] ...          (any call of an actor, its constructor too)
// In a driver it goes to the driver's standard error, tagged [driver <job>].
// Thread-safe; a line is written whole.
#pragma once

#include <string_view>

namespace yard {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

void log(LogLevel level, std::string_view message);
inline void log_debug(std::string_view message) { log(LogLevel::kDebug, message); }
inline void log_info(std::string_view message) { log(LogLevel::kInfo, message); }
inline void log_warning(std::string_view message) { log(LogLevel::kWarning, message); }
inline void log_error(std::string_view message) { log(LogLevel::kError, message); }

}  // namespace yard
