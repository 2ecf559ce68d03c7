#include "yard/registry.h"

namespace yard {

Registry& Registry::global() {
  static Registry r;
  return r;
}

void Registry::add_function_erased(const std::string& name, std::string key, detail::Invoker inv) {
  functions_[name] = std::move(inv);
  function_by_key_[std::move(key)] = name;
}

void Registry::add_actor_erased(std::type_index type, detail::ActorClass cls) {
  class_by_type_.insert_or_assign(type, cls.name);
  std::string name = cls.name;
  classes_.insert_or_assign(name, std::move(cls));
}

const detail::Invoker* Registry::function(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

std::string Registry::function_name(const std::string& key) const {
  auto it = function_by_key_.find(key);
  return it == function_by_key_.end() ? std::string() : it->second;
}

const detail::ActorClass* Registry::actor_class(const std::string& name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : &it->second;
}

const detail::ActorClass* Registry::actor_class(std::type_index type) const {
  auto it = class_by_type_.find(type);
  return it == class_by_type_.end() ? nullptr : actor_class(it->second);
}

namespace detail {
std::vector<std::string> split_names(const char* stringified) {
  std::vector<std::string> out;
  std::string s(stringified), cur;
  auto flush = [&] {
    auto b = cur.find_first_not_of(" \t\n&");
    auto e = cur.find_last_not_of(" \t\n");
    std::string t = b == std::string::npos ? "" : cur.substr(b, e - b + 1);
    auto colons = t.rfind("::");
    if (colons != std::string::npos) t = t.substr(colons + 2);
    out.push_back(t);
    cur.clear();
  };
  int depth = 0;  // inside <...> or (...): a comma there does not end a name
  for (char c : s) {
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c == ',' && depth == 0) flush();
    else cur.push_back(c);
  }
  if (!cur.empty() || !out.empty()) flush();
  return out;
}
}  // namespace detail

}  // namespace yard
