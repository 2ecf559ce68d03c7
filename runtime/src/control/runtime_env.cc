// RuntimeEnv (yard/runtime_env.h): its checks and its JSON form.
#include "yard/runtime_env.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "yard/errors.h"

namespace yard {

namespace {

bool shell_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

void RuntimeEnv::check() const {
  for (auto& [k, v] : env_vars) {
    if (!shell_name(k))
      throw InvalidArgument("runtime_env: '" + k + "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    if (k.rfind("YARD_", 0) == 0)
      throw InvalidArgument("runtime_env: " + k + " is Switchyard's own variable, not one a program sets");
    if (v.find('\0') != std::string::npos) throw InvalidArgument("runtime_env: the value of " + k + " holds a NUL");
  }
  if (!working_dir.empty() && working_dir[0] != '/')
    throw InvalidArgument("runtime_env: working_dir '" + working_dir + "' is not an absolute path");
}

std::string RuntimeEnv::to_json() const {
  return nlohmann::json{{"env_vars", env_vars}, {"working_dir", working_dir}}.dump();
}

RuntimeEnv RuntimeEnv::from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw InvalidArgument("runtime_env: not a JSON object: " + text);
  RuntimeEnv e;
  for (auto& [k, v] : j.items()) {
    if (k == "env_vars") {
      if (!v.is_object()) throw InvalidArgument("runtime_env: env_vars is not an object of strings");
      for (auto& [name, value] : v.items()) {
        if (!value.is_string()) throw InvalidArgument("runtime_env: env_vars." + name + " is not a string");
        e.env_vars[name] = value.get<std::string>();
      }
    } else if (k == "working_dir") {
      if (!v.is_string()) throw InvalidArgument("runtime_env: working_dir is not a string");
      e.working_dir = v.get<std::string>();
    } else {
      throw InvalidArgument("runtime_env: unknown field '" + k + "' (env_vars, working_dir)");
    }
  }
  e.check();
  return e;
}

}  // namespace yard
