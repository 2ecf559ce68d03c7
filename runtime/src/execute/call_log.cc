#include "execute/call_log.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "yard/log.h"
#include "yard/yard.h"

namespace yard::detail {

namespace {

thread_local std::string t_task_id, t_function;  // the task running on this thread ("": none)
std::mutex g_actor_mu;
std::string g_actor_tag;  // "[actor <id> Class 'name']" once the actor is made

}  // namespace

void set_log_actor(const std::string& id, const std::string& class_name, const std::string& name) {
  std::lock_guard<std::mutex> l(g_actor_mu);
  g_actor_tag = "[actor " + id + " " + class_name + (name.empty() ? "" : " '" + name + "'") + "]";
}

TaskLogScope::TaskLogScope(std::string_view task_id, std::string_view function)
    : outer_id_(std::move(t_task_id)), outer_function_(std::move(t_function)) {
  t_task_id.assign(task_id);
  t_function.assign(function);
}

TaskLogScope::~TaskLogScope() {
  t_task_id = std::move(outer_id_);
  t_function = std::move(outer_function_);
}

std::string log_tag() {
  {
    std::lock_guard<std::mutex> l(g_actor_mu);
    if (!g_actor_tag.empty()) return g_actor_tag;
  }
  if (!t_task_id.empty()) return "[task " + t_task_id + " " + t_function + "]";
  if (const char* w = std::getenv("YARD_WORKER_ID"); w && *w) return "[worker " + std::string(w) + "]";
  if (!is_initialized()) return "[process]";
  std::string job = job_id();
  return job.empty() ? "[process]" : "[driver " + job + "]";
}

}  // namespace yard::detail

namespace yard {

void log(LogLevel level, std::string_view message) {
  auto lvl = level == LogLevel::kDebug     ? spdlog::level::debug
             : level == LogLevel::kInfo    ? spdlog::level::info
             : level == LogLevel::kWarning ? spdlog::level::warn
                                           : spdlog::level::err;
  spdlog::log(lvl, "{} {}", detail::log_tag(), message);
}

}  // namespace yard
