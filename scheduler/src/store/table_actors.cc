#include "store/tables.h"

#include <nlohmann/json.hpp>

#include "store/fields.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

using json = nlohmann::json;
using yard::sched::store::fields::num;
using yard::sched::store::fields::text;

namespace yard::sched::store {

namespace {
std::vector<std::string> actor_hset(const ActorRecord& a) {
  return {"HSET", keys::actor(a.id), "class", a.class_name, "name", a.name, "state", name(a.state), "address", a.address,
          "worker", a.worker, "job", a.job, "node", a.node, "death_cause", a.cause, "resources", json(a.resources).dump(),
          "max_restarts", std::to_string(a.max_restarts), "num_restarts", std::to_string(a.num_restarts),
          "placement_group", a.pg, "bundle", std::to_string(a.bundle), "place_bundle", std::to_string(a.place_bundle),
          "detached", a.detached ? "1" : "0", "namespace", a.ns, "owner", a.owner};
}
}  // namespace

void Actors::add(const ActorRecord& a, const std::string& spec) {
  std::vector<std::vector<std::string>> cmds{{"SADD", keys::actors(), a.id}, actor_hset(a)};
  if (!spec.empty()) cmds.push_back({"SET", keys::actor_spec(a.id), spec});
  s_.write(std::move(cmds));
}

std::vector<std::string> Actors::ids() { return s_.cmd({"SMEMBERS", keys::actors()}).strings(); }

void Actors::save(const ActorRecord& a) { s_.write({actor_hset(a)}); }

std::optional<ActorRecord> Actors::get(const std::string& id) {
  auto f = s_.hgetall(keys::actor(id));
  auto state = parse_actor_state(text(f, "state"));
  if (f.empty() || !state) return std::nullopt;
  ActorRecord a;
  a.id = id;
  a.class_name = text(f, "class");
  a.name = text(f, "name");
  a.job = text(f, "job");
  a.state = *state;
  a.address = text(f, "address");
  a.worker = text(f, "worker");
  a.node = text(f, "node");
  a.cause = text(f, "death_cause");
  try {
    auto res = json::parse(text(f, "resources"));  // named: items() refers into it
    for (auto& [k, v] : res.items()) a.resources[k] = v.get<double>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  a.max_restarts = static_cast<int>(num(f, "max_restarts"));
  a.num_restarts = static_cast<uint32_t>(num(f, "num_restarts"));
  a.pg = text(f, "placement_group");
  a.bundle = static_cast<int>(num(f, "bundle", -1));
  a.place_bundle = static_cast<int>(num(f, "place_bundle", -1));
  a.detached = text(f, "detached") == "1";
  a.ns = text(f, "namespace");
  a.owner = text(f, "owner");
  if (a.ns.empty()) a.ns = a.job;
  return a;
}

std::optional<std::string> Actors::spec(const std::string& id) {
  auto r = s_.cmd({"GET", keys::actor_spec(id)});
  if (r.is_nil()) return std::nullopt;
  return r.str();
}

void Actors::drop_spec(const std::string& id) { s_.cmd({"DEL", keys::actor_spec(id)}); }

void Actors::name(const std::string& name, const std::string& id) { s_.cmd({"HSET", keys::actor_names(), name, id}); }

void Actors::unname(const std::string& name) { s_.write({{"HDEL", keys::actor_names(), name}}); }

void Actors::forget(const std::vector<std::pair<std::string, std::string>>& ids_and_names) {
  std::vector<std::vector<std::string>> cmds;
  for (auto& [id, name] : ids_and_names) {
    if (!name.empty()) cmds.push_back({"HDEL", keys::actor_names(), name});
    cmds.push_back({"SREM", keys::actors(), id});
    cmds.push_back({"DEL", keys::actor(id), keys::actor_spec(id)});
  }
  if (!cmds.empty()) s_.run_all(cmds);
}

}  // namespace yard::sched::store
